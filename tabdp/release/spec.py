"""Release specs: the reviewed ``release.toml`` an agency runs with ``tabdp run``.

A spec is parsed and validated entirely before any data is read: unknown keys are refused, and
every error names the key path (``tables[2].mechanism.sigma``), the value received, what is
allowed and how to fix it ([`SpecError`][tabdp.exceptions.SpecError]). Relative paths are resolved
against the folder of the spec file. Public metadata files named by the spec (hierarchies, domains,
allowed key combinations) are read by [`load_spec`][tabdp.release.load_spec] — they are public
input, never the confidential data.

In author mode (``input.mode = "author"``) the spec is read with the curator's configuration
(`curator_config`): it names a dataset and public metadata files by name only,
names no output folder, and every path, glob or name outside the curator's public folders is
refused from the text alone, before anything is read; messages then quote no server path.

The TOML schema (every key not listed is refused)::

    [release]                       # required
    name = "cbp_sample"             # required: letters, digits, '_', '-', '.'
    title = "County Business Patterns (sample)"        # optional
    description = "..."             # optional
    level = 0.9                     # optional: confidence level of margins of error, in (0, 1)
    delta = 1e-9                    # optional: δ of the (ε, δ) statements in the reports

    [input]                         # required
    path = "../data/cbp_sample.parquet"   # a Parquet file, a folder of Parquet files (recursive),
                                          # a hive-partitioned dataset folder, or a glob;
                                          # exactly one of path and table
    table = "lake.cbp_2026"         # instead of path (exactly one of the two): a table of the
                                    # Spark session's catalog (db.table or catalog.db.table),
                                    # read with `tabdp run --engine spark` only
    dataset = "cbp_2026"            # instead of path / table: a dataset of the curator
                                    # configuration (--curator CONFIG); REQUIRED in author mode,
                                    # where path, table and hive_partitioning are refused
    hive_partitioning = false       # optional bool; default: Polars' automatic detection
    unit = "estab_id"               # optional privacy-unit column; omitted: each row is a unit
                                    # (followed by a row id assigned when the input is read)
    mode = "curator"                # optional: "curator" (default: strict data-quality rules
                                    # may stop the run, exit 4) or "author" (every data-quality
                                    # rule below must be declared, so the run never fails on
                                    # the data's values; checked before any data is read)
    nulls = "error"                 # optional default null policy: "error" | "zero" | "drop"
                                    # (NaN counts as null)
    negatives = "error"             # optional, negative measure values: "error" (refuse the
                                    # run), "allow" (keep: signed measures), "zero" (clip to 0,
                                    # counted in the confidential report), "drop" (drop the row)
    nonfinite = "error"             # optional, +inf / -inf measure values: "error", "zero",
                                    # "drop" (drop the row) or "clamp" (to the bounds below)
    bounds = { payroll = [0, 1e10] }  # optional public bounds per summed measure: values are
                                    # clamped into [low, high] before anything is computed
                                    # (required for every summed measure in author mode)
    unit_nulls = "error"            # optional, rows whose unit id is null / NaN: "error" or
                                    # "drop" (required: "drop" in author mode with a unit)
    max_cells = 10                  # optional, with a unit: cells one unit may contribute to
                                    # in each table (beyond them its largest contributions are
                                    # kept); makes the planned curves bounds for every unit.
                                    # Counts also cap a unit's rows per cell at plan.count_rows

    [domains]                       # optional: public domain of a key column
    naics2 = ["11", "21", "22"]     # inline list (strings, integers or booleans; no duplicates)
    size_class = { file = "size_classes.csv", column = "size_class" }   # CSV or Parquet;
                                    # "column" defaults to the key name; duplicates dropped.
                                    # Author mode: every metadata file (domains, hierarchies,
                                    # keys) is a plain file NAME looked up in the curator's
                                    # public folders; paths, globs and '..' are refused

    [hierarchies.geo]               # optional; a named hierarchy given as a mapping file
    file = "../data/hierarchies/geography.csv"       # CSV or Parquet, one row per finest code
    levels = ["state", "county"]    # columns of the file, coarsest first; each level becomes
                                    # the domain of the key column of that name (distinct values)
                                    # and rollups may map a finer level to any coarser one

    [budget]                        # optional: per-record limit on the total PRzCDP ρ
    rho = 2.0                       # a number, or a curve {"1e3" = 0.5, "1e7" = 10.0}
                                    # (author mode: the curator's default budget when omitted)
    max_left_out = 0.05             # optional, curator mode: the run fails (exit 4, details in
                                    # confidential/failure.json) when the budget leaves out
                                    # more than this share of a table's rows or of a measure

    [randomness]                    # optional
    seed = 12345                    # integer: reproducible noise, FOR TESTS ONLY: `tabdp run`
                                    # refuses it without --test-seed and marks the public
                                    # folder NOT FOR PUBLICATION; the seed is never written to
                                    # a public file; omitted: secure OS randomness

    [output]                        # required (author mode: only `form`; the outputs go to
                                    # <curator output root>/<release.name>/{public,...})
    public = "../out/cbp/public"            # folder: must not exist (unless --overwrite)
    confidential = "../out/cbp/confidential"  # folder, must differ from (and not be inside)
                                            # the public one
    plan = "../out/cbp/plan"        # optional: where `tabdp plan` writes (default: a folder
                                    # "plan" next to the public folder)
    form = "long"                   # optional: public tables "long" (default: keys, measure,
                                    # estimate, sd, moe, lower, upper, cv, flag) or "wide"
                                    # (keys, then m, m_sd, m_moe, m_lower, m_upper, m_cv,
                                    # m_flag per measure); `tabdp run --form` overrides it

    [publication]                   # optional defaults for every table (a table may override)
    cv_flag = 0.3                   # flag "C" where cv >= this; false disables (default 0.3)
    suppress_cv = 1.0               # optional: withhold (null) estimates where cv >= this ("S")
    negative = "flag"               # "flag": flag "N", keep the signed estimate (default);
                                    # "clamp": flag "N" and publish 0 (documented post-processing)
    round = 1000.0                  # optional: publish estimates rounded to this unit (a table
                                    # may give { measure = unit }, or false for none); lower /
                                    # upper rounded outward, sd / moe never, cv from the
                                    # published value, flag R where coarse; rollups sum the
                                    # unrounded values. Here (global) it must be at most 0.1 x
                                    # each table's planned moe at its typical cell total (or
                                    # change no estimate), else set it per table

    [plan]                          # optional
    cell_totals = [10, 100, 1000]   # cell sizes for the expected-error tables (default 1..1e8)
    count_totals = [1, 10, 100]     # the same for count tables (default 1, 10, ..., 1e5)
    record_sizes = [1, 10, 100]     # record sizes of the policy curves (default 1, 10, ..., 1e8)
    count_rows = 1                  # rows one unit contributes to a count cell, assumed by the
                                    # planned curves (default 1: one row per unit); the
                                    # per-record report always uses the actual contributions

    [[tables]]                      # at least one
    name = "county_naics2"          # required: letters, digits, '_'; unique; no "__"
    kind = "sum"                    # "sum" (default) | "count"
    measures = ["payroll", "employment"]    # sum: required, non-empty, unique; count: refused
    by = ["county", "naics2"]       # key columns (may be empty: one national cell); each needs a
                                    # domain ([domains] or a hierarchy level) unless `keys` is set
    keys = { file = "allowed.parquet" }     # optional: allowed key combinations (CSV/Parquet with
                                    # exactly the `by` columns, no duplicate rows) instead of the
                                    # cross product of the domains
    mechanism = { family = "log", sigma = 0.3, offset = 1000.0 }
                                    # family (see MECHANISM_FAMILIES) and its constructor
                                    # arguments; exactly one of `mechanism` / `calibrate`
                                    # (a count may omit both: discrete Gaussian with sigma = 2)
    calibrate = { family = "log", targets = { "1e3" = 0.5, "1e7" = 10.0 },
                  typical_total = 1e6, fixed = { offset = 1000.0 }, objective = "auto" }
    grid = 1.0                      # optional exact-rounding grid of the noisy output: a
                                    # number > 0 or {measure = step}; default: each mechanism's
                                    # default. Additive mechanisms: the estimate's grid (e.g.
                                    # 1.0 dollar); transformation mechanisms: the grid of the
                                    # noisy transformed value (at most sigma/10; use
                                    # publication.round to round their published estimates)
    nulls = "drop"                  # optional override of input.nulls
    publication = { cv_flag = 0.5 } # optional override of [publication], key by key

    [[tables.rollups]]              # optional, any number
    by = ["state", "naics2"]        # coarser grouping: each column is either in the table's
                                    # `by` or a coarser level of a hierarchy whose finer level
                                    # is in the table's `by`; [] is the national total
    direct = false                  # also release this level directly (more budget, more
                                    # accuracy; accounted in the ledger)
"""

from __future__ import annotations

import contextvars
import copy
import difflib
import hashlib
import inspect
import json
import math
import os
import re
import stat
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

import polars as pl

from tabdp import mechanisms, registry
from tabdp._defaults import NEGATIVE_RULES
from tabdp._defaults import NEGATIVES as DEFAULT_NEGATIVES
from tabdp._validation import bounds_text
from tabdp.calibrate import calibrate
from tabdp.exceptions import SpecError, TabdpError
from tabdp.release.curator_config import CuratorConfig, DatasetDecl

__all__ = [
    "MECHANISM_FAMILIES",
    "CALIBRATION_FAMILIES",
    "SPEC_KEYS",
    "ReleaseSpec",
    "ReleaseInfo",
    "InputSpec",
    "Hierarchy",
    "BudgetSpec",
    "OutputSpec",
    "Publication",
    "PlanSpec",
    "TableSpec",
    "RollupSpec",
    "load_spec",
    "parse_spec",
    "read_keys",
    "align_keys",
    "RESERVED_COLUMNS",
    "redact_spec",
    "public_spec_hash",
    "spec_keys_hint",
    "ROUND_MOE_SHARE",
    "global_round_problem",
]

#: Spec family name -> mechanism class name in :mod:`tabdp.mechanisms` (read from
#: :mod:`tabdp.registry`, canonical names; the registry's aliases such as ``"log_transform"`` are
#: accepted too). The other keys of a ``mechanism`` table are that class's constructor arguments.
MECHANISM_FAMILIES: dict[str, str] = {
    f.name: f.cls.__name__ for f in registry.families("mechanism", tag="spec")}

#: Families ``tabdp.calibrate`` accepts (``calibrate.family``).
CALIBRATION_FAMILIES: tuple[str, ...] = registry.names("mechanism", tag="calibrate")


#: Rounding rule: a global ``[publication] round`` applies to a table only where the unit is at
#: most this share of the table's planned margin of error at its typical cell total (else the
#: spec is refused: set ``round`` per table); the ``R`` flag marks published cells whose unit
#: is more than this share of their own margin of error. At 0.1 the rounding error (at most half
#: the unit, standard deviation unit/sqrt(12)) adds less than 0.3% to the standard deviation.
ROUND_MOE_SHARE = 0.1


@dataclass(frozen=True)
class ReleaseInfo:
    """``[release]``: name, title, description, MOE level and the reports' δ."""

    name: str
    title: str = ""
    description: str = ""
    level: float = 0.9
    delta: float | None = None


@dataclass(frozen=True)
class InputSpec:
    """``[input]``: where the confidential data is and how to treat bad values.

    ``mode`` is ``"curator"`` (strict data-quality rules allowed) or ``"author"`` (every rule
    declared, so no value in the data can make the run fail). ``bounds`` maps a measure to its
    public ``(low, high)``.

    ``path`` is absolute (resolved against the spec's folder). ``source`` is what Polars scans:
    the file, or a recursive glob ``<folder>/**/*.parquet`` for a folder, or the glob given.
    With ``table`` (a table of the Spark catalog, read by the Spark engine only), ``path`` is
    ``None`` and ``source`` the table name. With ``dataset`` (the name of a dataset of the
    curator configuration, required in author mode), ``path`` / ``table`` are the dataset's and
    ``schema`` its declared column -> dtype name (empty when the curator declares none).
    """

    path: Path | None
    source: str
    hive_partitioning: bool | None = None
    unit: str | None = None
    nulls: str = "error"
    negatives: str = DEFAULT_NEGATIVES
    mode: str = "curator"
    nonfinite: str = "error"
    bounds: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    unit_nulls: str = "error"
    max_cells: int | None = None
    table: str | None = None
    dataset: str | None = None
    schema: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hierarchy:
    """``[hierarchies.<name>]``: levels coarsest first and the mapping.

    ``mapping`` holds one row per finest code (distinct rows) and one String/integer column per
    level; every finer code maps to exactly one coarser code.
    """

    name: str
    file: Path
    levels: tuple[str, ...]
    mapping: pl.DataFrame


@dataclass(frozen=True)
class BudgetSpec:
    """``[budget]``: a constant ρ or a ``{size: rho}`` curve (float keys)."""

    rho: float | Mapping[float, float]
    #: Curator mode: the largest share of a table's rows or of any of its measures the budget
    #: may leave out; above it the run fails (a data-dependent failure). ``None``: no limit.
    max_left_out: float | None = None


@dataclass(frozen=True)
class OutputSpec:
    """``[output]``: absolute folders and the form of the public tables."""

    public: Path
    confidential: Path
    plan: Path
    form: str = "long"


@dataclass(frozen=True)
class Publication:
    """Publication rules after noise (``[publication]`` merged with a table's override)."""

    cv_flag: float | None = 0.3
    suppress_cv: float | None = None
    round: float | Mapping[str, float] | None = None
    negative: str = "flag"


@dataclass(frozen=True)
class PlanSpec:
    """``[plan]``: record sizes of policy curves and cell totals of the expected-error tables."""

    record_sizes: tuple[float, ...] = tuple(10.0 ** k for k in range(9))
    cell_totals: tuple[float, ...] = tuple(10.0 ** k for k in range(9))
    count_totals: tuple[float, ...] = tuple(10.0 ** k for k in range(6))
    count_rows: int = 1


@dataclass(frozen=True)
class RollupSpec:
    """``[[tables.rollups]]``: a coarser grouping derived from the table.

    With ``direct = true`` the level is also released directly (more budget, more accuracy).
    ``maps`` gives, for each rollup column that is not one of the table's ``by`` columns, the
    ``(hierarchy name, finer table column)`` it is derived from.
    """

    by: tuple[str, ...]
    direct: bool = False
    maps: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """File-name label of this level: the columns joined by ``_`` (``national`` for ())."""
        return "_".join(self.by) if self.by else "national"


@dataclass(frozen=True)
class TableSpec:
    """``[[tables]]``: one released table.

    ``mechanism`` is always a built [`Mechanism`][tabdp.mechanisms.Mechanism]: the one the spec's
    ``mechanism`` table describes, or the result of [`calibrate`][tabdp.calibrate.calibrate] for a
    ``calibrate`` table (run once while parsing: it reads no data), or
    ``DiscreteGaussian(sigma=2.0)`` for a count with neither. ``calibration`` is set only for
    calibrated tables: the validated ``calibrate`` table as ``{"family", "targets": {size: rho}
    (float keys), "typical_total", "fixed": {...}, "objective"}``. ``raw_mechanism`` is the
    mechanism as a plain dict with its ``family`` (as written, the calibrated parameters, or the
    count default) for the manifest. ``measures`` is empty for a count (its output column, and its
    ``grid`` key, is ``count``). ``keys_file`` is the allowed-key-combinations file (absolute) when
    ``keys`` is given.
    """

    name: str
    kind: str
    measures: tuple[str, ...]
    by: tuple[str, ...]
    mechanism: Any = None
    calibration: Mapping[str, Any] | None = None
    keys_file: Path | None = None
    grid: float | Mapping[str, float] | None = None
    nulls: str = "error"
    publication: Publication = Publication()
    rollups: tuple[RollupSpec, ...] = ()
    raw_mechanism: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReleaseSpec:
    """A validated release spec.

    Attributes:
        path: The spec file (absolute), or ``None`` when parsed from a dict.
        sha256: SHA-256 of the spec file's bytes (hex), or of the canonical JSON of the dict.
            It covers the seed: CONFIDENTIAL for a seeded spec (a small seed could be found by
            trying them all), so it is never written to a public file.
        raw: The parsed TOML (confidential when seeded: it holds the seed).
        release: The ``[release]`` section, validated; so are ``input``, ``domains``,
            ``hierarchies``, ``budget``, ``seed``, ``output``, ``publication``, ``plan`` and
            ``tables``. ``domains`` maps a key column to its public values (a one-column Polars
            Series named after the column), including every hierarchy level.
    """

    path: Path | None
    sha256: str
    raw: Mapping[str, Any]
    release: ReleaseInfo
    input: InputSpec
    domains: Mapping[str, pl.Series]
    hierarchies: Mapping[str, Hierarchy]
    budget: BudgetSpec | None
    seed: int | None
    output: OutputSpec
    publication: Publication
    plan: PlanSpec
    tables: tuple[TableSpec, ...]

    @property
    def public_raw(self) -> dict[str, Any]:
        """The spec without its ``[randomness]`` section: what the manifest may echo.

        Example:
            >>> redact_spec({"release": {"name": "x"}, "randomness": {"seed": 7}})
            {'release': {'name': 'x'}}
        """
        return redact_spec(self.raw)

    @property
    def public_sha256(self) -> str:
        """SHA-256 of the canonical JSON of `public_raw` (the hash outputs may publish).

        Two specs that differ only in ``[randomness]`` have the same public hash, so it tells
        nothing about the seed.
        """
        return public_spec_hash(self.raw)


def redact_spec(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a parsed spec without the ``[randomness]`` section (the seed).

    Args:
        raw: The parsed TOML.

    Returns:
        The copy, safe to publish as far as randomness goes.

    Example:
        >>> redact_spec({"release": {"name": "x"}, "randomness": {"seed": 7}})
        {'release': {'name': 'x'}}
    """
    return {k: copy.deepcopy(v) for k, v in raw.items() if k != "randomness"}


def public_spec_hash(raw: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of `redact_spec` of ``raw``.

    Canonical JSON: keys sorted, no whitespace, UTF-8, values that are not JSON (dates) as text.

    Args:
        raw: The parsed TOML.

    Returns:
        64 hex digits, independent of the seed.

    Example:
        >>> a = public_spec_hash({"release": {"name": "x"}, "randomness": {"seed": 7}})
        >>> a == public_spec_hash({"release": {"name": "x"}, "randomness": {"seed": 8}})
        True
    """
    text = json.dumps(redact_spec(raw), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_SCHEMA = "the full schema is in the docstring of tabdp.release.spec"
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_RELEASE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_TABLE_NAME = re.compile(r"^[A-Za-z0-9_]+$")
_TABLE_REF = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+){0,2}$")
_NULLS = ("error", "zero", "drop")
_NEGATIVES = NEGATIVE_RULES  # the Python API's rules and default (tabdp._defaults)
_KINDS = ("sum", "count")
_NEGATIVE_RULES = ("flag", "clamp")
_OBJECTIVES = ("auto", "sd", "moe")
_FRAME_SUFFIXES = (".csv", ".parquet", ".pq")

#: Every key a spec accepts, per table, by key path: ``""`` is the top level, ``tables[]`` each
#: ``[[tables]]`` entry, ``hierarchies.*`` each named hierarchy and ``domains.*`` a domain given as
#: a file. The parser refuses any other key; the docs' spec reference is generated from this table
#: and checked against the schema above (docs/_gen/refgen.py).
SPEC_KEYS: dict[str, tuple[str, ...]] = {
    "": ("release", "input", "domains", "hierarchies", "budget", "randomness", "output",
         "publication", "plan", "tables"),
    "release": ("name", "title", "description", "level", "delta"),
    "input": ("path", "table", "dataset", "hive_partitioning", "unit", "mode", "nulls",
              "negatives", "nonfinite", "bounds", "unit_nulls", "max_cells"),
    "domains.*": ("file", "column"),
    "hierarchies.*": ("file", "levels"),
    "budget": ("rho", "max_left_out"),
    "randomness": ("seed",),
    "output": ("public", "confidential", "plan", "form"),
    "publication": ("cv_flag", "suppress_cv", "negative", "round"),
    "plan": ("cell_totals", "count_totals", "record_sizes", "count_rows"),
    "tables[]": ("name", "kind", "measures", "by", "keys", "mechanism", "calibrate", "grid",
                 "nulls", "publication", "rollups"),
    "tables[].keys": ("file",),
    "tables[].calibrate": ("family", "targets", "typical_total", "fixed", "objective"),
    "tables[].rollups[]": ("by", "direct"),
}
_ROOT_KEYS = SPEC_KEYS[""]
_ROOT_REQUIRED = ("release", "input", "output")  # and a non-empty "tables", checked apart
_RELEASE_KEYS = SPEC_KEYS["release"]
_INPUT_KEYS = SPEC_KEYS["input"]
_MODES = ("curator", "author")
_NONFINITE = ("error", "zero", "drop", "clamp")
_UNIT_NULLS = ("error", "drop")
_HIERARCHY_KEYS = SPEC_KEYS["hierarchies.*"]
_DOMAIN_FILE_KEYS = SPEC_KEYS["domains.*"]
_OUTPUT_KEYS = SPEC_KEYS["output"]
_PUBLICATION_KEYS = SPEC_KEYS["publication"]
_PLAN_KEYS = SPEC_KEYS["plan"]
_TABLE_KEYS = SPEC_KEYS["tables[]"]
_ROLLUP_KEYS = SPEC_KEYS["tables[].rollups[]"]
_CALIBRATE_KEYS = SPEC_KEYS["tables[].calibrate"]
_OUTPUT_FOLDERS = ("public", "confidential", "plan")


# -- messages -----------------------------------------------------------------------------------
def _join(path: str, key: Any) -> str:
    """Key path of ``key`` inside ``path`` (keys that are not bare TOML keys are quoted)."""
    key = str(key)
    text = key if _BARE_KEY.match(key) else json.dumps(key)
    return f"{path}.{text}" if path else text


def _tname(value: Any) -> str:
    """TOML-ish type name of a parsed value."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "table"
    return type(value).__name__


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:157] + "..."


def _fail(path: str, message: str, hint: str) -> NoReturn:
    raise SpecError(path, f"{message}\nHint: {hint}")


def _maybe(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def _article(word: str) -> str:
    return "an" if word[:1] in ("a", "e", "i", "o", "u") else "a"


def _names(items: Sequence[Any]) -> str:
    return ", ".join(repr(x) for x in items) if items else "(none)"


# -- typed getters ------------------------------------------------------------------------------
def _table(value: Any, path: str, *, allowed: Sequence[str], required: Sequence[str] = (),
           example: str = "") -> dict[str, Any]:
    """Check that ``value`` is a table with only ``allowed`` keys and every ``required`` one."""
    where = path or "the spec"
    if not isinstance(value, Mapping):
        _fail(path, f"must be a table; got {_show(value)} ({_tname(value)}).",
              f"write it as a TOML table{' such as ' + example if example else ''}; "
              f"allowed keys: {', '.join(allowed)}.")
    for key, item in value.items():
        if key not in allowed:
            _fail(_join(path, str(key)),
                  f"unknown key {key!r} (value {_show(item)}) in {where}."
                  f"{_maybe(str(key), allowed)} Allowed keys: {', '.join(allowed)}.",
                  f"fix the spelling or remove the key; {_SCHEMA}.")
    missing = [k for k in required if k not in value]
    if missing:
        what = "section(s)" if not path else "key(s)"
        _fail(path, f"missing required {what} {_names(missing)} in {where}.",
              f"add {', '.join(missing)}{' (e.g. ' + example + ')' if example else ''}; "
              f"{_SCHEMA}.")
    return dict(value)


def _string(value: Any, path: str, *, what: str, hint: str, pattern: re.Pattern[str] | None = None,
            rule: str = "") -> str:
    if not isinstance(value, str) or not value:
        _fail(path, f"{what} must be a non-empty string; got {_show(value)} ({_tname(value)}).",
              hint)
    if pattern is not None and not pattern.match(value):
        _fail(path, f"{what} {value!r} is not allowed: {rule}.", hint)
    return value


def _enum(value: Any, path: str, choices: Sequence[str], hint: str) -> str:
    if not isinstance(value, str) or value not in choices:
        maybe = _maybe(value, choices) if isinstance(value, str) else ""
        _fail(path, f"must be one of {_names(choices)}; got {_show(value)} "
                    f"({_tname(value)}).{maybe}", hint)
    return value


def _bool(value: Any, path: str, hint: str) -> bool:
    if not isinstance(value, bool):
        _fail(path, f"must be true or false; got {_show(value)} ({_tname(value)}).", hint)
    return value


def _number(value: Any, path: str, *, what: str, hint: str, gt: float | None = None,
            ge: float | None = None, lt: float | None = None) -> float:
    rng = bounds_text(gt, ge, lt)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(path, f"{what} must be a number{' ' + rng if rng else ''}; got {_show(value)} "
                    f"({_tname(value)}).", hint)
    x = float(value)
    ok = math.isfinite(x) and (gt is None or x > gt) and (ge is None or x >= ge)
    if not ok or (lt is not None and x >= lt):
        _fail(path, f"{what} must be a finite number{' ' + rng if rng else ''}; "
                    f"got {_show(value)}.", hint)
    return x


def _str_list(value: Any, path: str, *, what: str, hint: str, nonempty: bool) -> tuple[str, ...]:
    if not isinstance(value, list):
        _fail(path, f"{what} must be an array of strings; got {_show(value)} ({_tname(value)}).",
              hint)
    for j, item in enumerate(value):
        if not isinstance(item, str) or not item:
            _fail(f"{path}[{j}]", f"{what} must hold non-empty strings; got {_show(item)} "
                                  f"({_tname(item)}).", hint)
    if nonempty and not value:
        _fail(path, f"{what} must not be empty; got [].", hint)
    seen: set[str] = set()
    for item in value:
        if item in seen:
            _fail(path, f"{what} lists {item!r} twice: {_show(value)}.",
                  "remove the duplicate; each name may appear once.")
        seen.add(item)
    return tuple(value)


def _size_key(key: str, path: str, *, what: str, hint: str) -> float:
    """A ``"1e3"``-style table key parsed as a finite float > 0."""
    try:
        x = float(key)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and x > 0.0):
        _fail(path, f"{what} {key!r} is not a number > 0 (keys are sizes written as strings).",
              hint)
    return x


def _size_curve(value: Any, path: str, *, what: str, hint: str) -> dict[float, float]:
    """A non-empty table ``{"size" = value > 0}`` with distinct sizes."""
    if not isinstance(value, Mapping) or not value:
        _fail(path, f"{what} must be a non-empty table {{\"size\" = value}}; got {_show(value)} "
                    f"({_tname(value)}).", hint)
    out: dict[float, float] = {}
    for key, item in value.items():
        kp = _join(path, str(key))
        size = _size_key(str(key), kp, what="size", hint=hint)
        if size in out:
            _fail(kp, f"size {key!r} = {size:g} is given twice in {what}.",
                  "keep one entry per size.")
        out[size] = _number(item, kp, what=f"the value at size {key!r}", gt=0.0, hint=hint)
    return out


def _cv(value: Any, path: str) -> float | None:
    hint = "a coefficient of variation such as 0.3, or false to disable the rule."
    if value is False:
        return None
    if value is True:
        _fail(path, "must be a number > 0 or false; got true.", hint)
    return _number(value, path, what="the cv threshold", gt=0.0, hint=hint)


# -- files --------------------------------------------------------------------------------------
#: Author mode: the curator's configuration, and the declared name of every public file found
#: (messages show the name, never the server path). Set by :func:`parse_spec` for one parse.
_AUTHOR: contextvars.ContextVar[tuple[CuratorConfig, dict[Path, str]] | None] = \
    contextvars.ContextVar("_AUTHOR", default=None)
_PLAIN_NAME_BAD = set("/\\*?[]{}\x00")


def _shown(file: Path) -> str:
    """How a message shows a metadata file: its declared name in author mode, else its path."""
    ctx = _AUTHOR.get()
    if ctx is not None:
        return ctx[1].get(file, "<a file of the curator's public folders>")
    return str(file)


def _resolve(base: Path, text: str) -> Path:
    p = Path(text).expanduser()
    if not p.is_absolute():
        p = base / p
    return Path(os.path.normpath(p))


def _plain_name(text: str, path: str, what: str) -> None:
    """Author mode: a metadata file is named by its plain file name (decided from the text)."""
    bad = (not text or text in (".", "..") or text.startswith("~") or ".." in text
           or any(ch in _PLAIN_NAME_BAD for ch in text) or re.match(r"^[A-Za-z]:", text)
           or any(ord(ch) < 32 for ch in text))
    if bad:
        _fail(path, f"in author mode (input.mode = \"author\") a {what} file is named by its "
                    f"plain file name, looked up in the curator's public folders; got "
                    f"{text!r}, which is a path, a pattern or not a plain name (no '/', '\\', "
                    "'..', leading '~', drive letter, control character or glob character "
                    "* ? [ ] { }).",
              'write the file name only, e.g. file = "naics2.csv"; ask the curator to put '
              "the file in a public folder of the curator configuration.")


def _public_file(text: str, path: str, what: str, config: CuratorConfig) -> Path:
    """Author mode: the public metadata file ``text`` (a plain name) in the public folders.

    A file found in a public folder whose real location (symbolic links resolved) is outside
    that folder or inside a dataset root is refused, with the same message as a missing file:
    neither quotes a server path. So is a file with more than one hard link (``st_nlink >
    1``): a hard link has no real location to resolve, and its other name may be a dataset
    file (a confidential Parquet file linked into a public folder would otherwise be read as
    a key list).
    """
    _plain_name(text, path, what)
    roots = config.dataset_roots()
    for folder in config.public_folders:
        candidate = folder / text
        real = Path(os.path.realpath(candidate))
        top = Path(os.path.realpath(folder))
        if top not in real.parents or any(real == r or r in real.parents for r in roots):
            continue
        try:
            st = real.stat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            return real
    _fail(path, f"{what} file {text!r} is not in the curator's public folders (an author-mode "
                "spec names public metadata files only: domains, key lists, hierarchies).",
          "check the name, or ask the curator to publish the file in a public folder of the "
          "curator configuration.")


def _file_path(value: Any, path: str, base: Path, what: str) -> Path:
    ctx = _AUTHOR.get()
    if ctx is not None:
        text = _string(value, path, what=f"the {what} file",
                       hint=f'the plain name of a public {what} file, e.g. file = "codes.csv".')
        file = _public_file(text, path, what, ctx[0])
        ctx[1][file] = text
        return file
    text = _string(value, path, what=f"the {what} file",
                   hint=f"give the path of a CSV or Parquet file ({what}), absolute or relative "
                        "to the spec's folder.")
    return _resolve(base, text)


def _read_frame(file: Path, path: str, what: str, written: str) -> pl.DataFrame:
    """Read a public metadata file (CSV as strings, or Parquet)."""
    if not file.is_file():
        _fail(path, f"{what} file not found: {written!r} (resolved to {_shown(file)!r}).",
              "fix the path; relative paths are resolved against the folder of the spec file.")
    suffix = file.suffix.lower()
    if suffix not in _FRAME_SUFFIXES:
        _fail(path, f"{what} file {_shown(file)!r} has suffix {suffix!r}; allowed: "
                    f"{_names(_FRAME_SUFFIXES)}.",
              "save it as CSV (read as text, so codes like '01' keep their zeros) or Parquet.")
    try:
        if suffix == ".csv":
            return pl.read_csv(file, infer_schema=False)
        return pl.read_parquet(file)
    except (pl.exceptions.PolarsError, OSError, ValueError) as err:
        detail = f": {err}" if _AUTHOR.get() is None else " (not a CSV file with a header " \
            "row, nor a Parquet file)"
        _fail(path, f"cannot read {what} file {_shown(file)!r}{detail}",
              "fix the file (CSV with a header row, or Parquet).")


def _frame_column(frame: pl.DataFrame, column: str, path: str, file: Path) -> pl.Series:
    if column not in frame.columns:
        _fail(path, f"column {column!r} is not in {_shown(file)!r}; its columns are "
                    f"{_names(frame.columns)}.{_maybe(column, frame.columns)}",
              "fix the column name or the file.")
    return frame[column]


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
        if not isinstance(name, str) or not _TABLE_NAME.match(name):
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
            if level in owner:
                _fail(lp, f"level {level!r} is also a level of hierarchy {owner[level]!r}.",
                      "a key column can belong to one hierarchy only; merge the hierarchies "
                      "or rename the column.")
            if level in domains:
                _fail(lp, f"level {level!r} also has a domain in [domains].",
                      f"remove domains.{level}: a hierarchy level's domain is the distinct "
                      "codes of the mapping file.")
            owner[level] = name
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
            bad = (mapping.select(coarse, fine).unique()
                   .group_by(fine).agg(pl.col(coarse).sort().alias("parents"))
                   .filter(pl.col("parents").list.len() > 1).sort(fine))
            if bad.height:
                code, parents = bad.row(0)
                _fail(fp, f"{fine!r} code {code!r} maps to several {coarse!r} codes "
                          f"{_show(parents)} in {_shown(file)!r} ({bad.height} such code(s)); "
                          "each finer code must map to exactly one coarser code.",
                      f"fix the mapping file, or list the levels coarsest first "
                      f"(got {_show(list(levels))}).")
        for level in levels:
            domains[level] = mapping[level].unique(maintain_order=True).sort()
        out[name] = Hierarchy(name=name, file=file, levels=levels, mapping=mapping)
    return out


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
                                          hint=hint), max_left_out=max_left_out)
    return BudgetSpec(rho=_number(value, "budget.rho", what="the budget rho", gt=0.0, hint=hint),
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
            if not value:
                _fail(rp, "must not be an empty table; got {}.", hint)
            units = {}
            for key, v in value.items():
                kp = _join(rp, str(key))
                if key not in measures:
                    _fail(kp, f"{key!r} is not a measure of this table (measures: "
                              f"{_names(measures)}).{_maybe(str(key), measures)}", hint)
                units[key] = _number(v, kp, what="the rounding unit", gt=0.0, hint=hint)
            changes["round"] = units
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
                    f"({_tname(raw)}).", 'e.g. mechanism = { family = "log", sigma = 0.3, '
                                         'offset = 1000.0 }.')
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
    keys = {float(k): str(k) for k in raw}
    pts = sorted(targets.items())
    for (s0, r0), (s1, r1) in zip(pts, pts[1:], strict=False):
        if r1 < r0:
            _fail(_join(path, keys[s1]),
                  f"the target at size {keys[s1]!r} (rho = {r1:g}) is below the target at the "
                  f"smaller size {keys[s0]!r} (rho = {r0:g}): a larger record would be "
                  "allowed less loss. Every mechanism's loss increases with the record size, "
                  f"so the target at {keys[s1]!r} would bind and force noise holding records of "
                  f"that size to rho = {r1:g}; records of size {keys[s0]!r} would lose far less "
                  f"than {r0:g}, and typical cells would get far more noise than intended.",
                  "give larger sizes larger (or equal) targets, e.g. targets = { \"1e3\" = 0.5, "
                  "\"1e7\" = 10.0 }; for one limit at every size, give a single target at the "
                  "largest plausible size.")


def _parse_grid(raw: Any, path: str, kind: str, measures: tuple[str, ...]
                ) -> float | dict[str, float]:
    hint = "a rounding unit > 0 such as grid = 1000.0, or per measure grid = { payroll = 1000.0 }."
    if isinstance(raw, Mapping):
        names = measures if kind == "sum" else ("count",)
        if not raw:
            _fail(path, "must not be an empty table; got {}.", hint)
        out = {}
        for key, value in raw.items():
            kp = _join(path, str(key))
            if key not in names:
                _fail(kp, f"{key!r} is not a measure of this table (measures: {_names(names)})."
                          f"{_maybe(str(key), names)}", hint)
            out[key] = _number(value, kp, what="the grid step", gt=0.0, hint=hint)
        return out
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
                if lv not in by:
                    derivable[lv] = (h.name, h.levels[finest])
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


def align_keys(frame: pl.DataFrame, domains: Mapping[str, pl.Series]) -> pl.DataFrame:
    """Cast the columns of an allowed-keys frame to the types of their domains, if any.

    Args:
        frame: Keys read from a file (CSV columns are text).
        domains: The spec's domains.

    Returns:
        The frame with each column that has a domain cast (strictly) to the domain's type.

    Raises:
        polars.exceptions.PolarsError: A value does not convert.

    Example:
        >>> align_keys(pl.DataFrame({"year": ["2024"]}), {"year": pl.Series([2024])}).dtypes
        [Int64]
    """
    return frame.with_columns(pl.col(c).cast(domains[c].dtype, strict=True)
                              for c in frame.columns if c in domains)


def read_keys(file: Path, by: Sequence[str], domains: Mapping[str, pl.Series]) -> pl.DataFrame:
    r"""The allowed key combinations of a table, typed like the domains.

    Args:
        file: The keys file (validated by [`parse_spec`][tabdp.release.parse_spec]).
        by: The table's key columns (output order).
        domains: The spec's domains.

    Returns:
        The keys, columns in ``by`` order.

    Example:
        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "k.csv"
        >>> _ = f.write_text("year,code\n2024,01\n")
        >>> read_keys(f, ["code", "year"], {"year": pl.Series([2024])}).row(0)
        ('01', 2024)
    """
    frame = (pl.read_csv(file, infer_schema=False) if file.suffix.lower() == ".csv"
             else pl.read_parquet(file))
    return align_keys(frame, domains).select(list(by))


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
                      f"add domains.{col} = [...], make {col!r} a hierarchy level, or give "
                      "keys = { file = ... } with the allowed combinations.")
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
              'add mechanism = { family = "log", sigma = 0.3, offset = 1000.0 } or '
              'calibrate = { family = "log", targets = { "1e3" = 0.5 }, typical_total = 1e6 }.')
    grid = _parse_grid(d["grid"], f"{tp}.grid", kind, measures) if "grid" in d else None
    if grid is not None and isinstance(mech, mechanisms.TransformationMechanism):
        steps = grid.values() if isinstance(grid, Mapping) else [grid]
        limit = 0.1 * float(mech.sigma)
        if max(steps) > limit:
            _fail(f"{tp}.grid", f"{_show(d['grid'])} is too coarse for a transformation "
                                f"mechanism: its grid rounds the noisy TRANSFORMED value "
                                f"(e.g. log(total + offset)), so it must be at most sigma/10 = "
                                f"{limit:g} (default: {mech.default_grid():g}).",
                  "leave grid out, and round the published estimates with "
                  "publication.round = 1000.0 (or { payroll = 1000.0 }) instead.")
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
    return TableSpec(name=name, kind=kind, measures=measures, by=by, mechanism=mech,
                     calibration=calibration, keys_file=keys_file, grid=grid, nulls=nulls,
                     publication=pub, rollups=rollups, raw_mechanism=raw_mech)


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
        moe = float(mech.moe_at(typical, level))
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


def load_spec(path: str | Path, *, curator: CuratorConfig | None = None) -> ReleaseSpec:
    """Read and validate a ``release.toml``.

    The file's SHA-256 is recorded (``spec.sha256``) so the outputs can name the exact spec
    they come from; relative paths inside are resolved against the file's folder.

    Args:
        path: The spec file.
        curator: The curator's configuration (`load_curator_config()`):
            required by an author-mode spec, optional otherwise (``input.dataset``).

    Returns:
        The validated [`ReleaseSpec`][tabdp.release.ReleaseSpec].

    Raises:
        SpecError: The file is missing, not valid TOML, or breaks the schema (the message names
            the key path and the fix).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> folder = Path(tempfile.mkdtemp())
        >>> text = '''
        ... [release]
        ... name = "demo"
        ... [input]
        ... path = "data.parquet"
        ... [domains]
        ... region = ["north", "south"]
        ... [output]
        ... public = "out/public"
        ... confidential = "out/confidential"
        ... [[tables]]
        ... name = "units"
        ... kind = "count"
        ... by = ["region"]
        ... '''
        >>> _ = (folder / "release.toml").write_text(text)
        >>> spec = load_spec(folder / "release.toml")
        >>> spec.output.public == folder / "out" / "public", spec.tables[0].mechanism
        (True, DiscreteGaussian(sigma=2.0))
        >>> len(spec.sha256)
        64
        >>> _ = (folder / "typo.toml").write_text(text.replace("kind", "knd"))
        >>> try:
        ...     load_spec(folder / "typo.toml")
        ... except SpecError as err:
        ...     error = err
        >>> error.path, "Did you mean 'kind'?" in str(error)
        ('tables[0].knd', True)
        >>> import shutil
        >>> shutil.rmtree(folder)
    """
    file = Path(os.path.abspath(Path(path).expanduser()))
    try:
        content = file.read_bytes()
    except FileNotFoundError:
        raise SpecError("", f"release spec file not found: {str(file)!r}.\nHint: fix the path "
                            "to the release.toml (relative paths start from the current "
                            "folder).") from None
    except OSError as err:
        raise SpecError("", f"cannot read the release spec {str(file)!r}: {err}\nHint: fix the "
                            "path; it must name a readable TOML file.") from None
    _refuse_data_file(file, content)
    try:
        data = tomllib.loads(content.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise SpecError("", f"{str(file)!r} is not UTF-8 text ({err}).\nHint: save the spec as "
                            "UTF-8.") from None
    except tomllib.TOMLDecodeError as err:
        raise SpecError("", f"{str(file)!r} is not valid TOML: {err}.\nHint: fix the syntax at "
                            "that line and column (strings need quotes, tables [name], arrays of "
                            "tables [[tables]]).") from None
    return parse_spec(data, file.parent, path=file, sha256=hashlib.sha256(content).hexdigest(),
                      curator=curator)


#: Suffixes of data files (never a spec): ``tabdp validate data.parquet`` says so plainly.
_DATA_SUFFIXES = (".parquet", ".pq", ".csv", ".tsv", ".arrow", ".feather", ".ipc", ".orc",
                  ".avro", ".xlsx", ".xls", ".gz", ".zip")


def _refuse_data_file(file: Path, content: bytes) -> None:
    r"""A data file or another binary file given where a spec is expected: say so plainly.

    Example:
        >>> try:
        ...     _refuse_data_file(Path("data.parquet"), b"PAR1\x15\x04")
        ... except SpecError as err:
        ...     print(str(err).splitlines()[0])
        'data.parquet' is a Parquet data file, not a release spec (a TOML text file).
    """
    if content[:4] == b"PAR1":
        what = "a Parquet data file"
    elif file.suffix.lower() in _DATA_SUFFIXES:
        what = f"a data file ({file.suffix.lower()})"
    elif b"\x00" in content[:8192]:
        what = "a binary file"
    else:
        return
    raise SpecError("", f"{str(file)!r} is {what}, not a release spec (a TOML text file)."
                        "\nHint: pass the release spec (e.g. tabdp validate release.toml); the "
                        "spec names its data in [input] path = \"...\".")


#: Columns of the public tables: no key column may have these names.
RESERVED_COLUMNS = ("measure", "estimate", "sd", "moe", "lower", "upper", "cv", "flag", "cells",
                    "_tabdp_national", "__tabdp_row")


def _check_tables(tables: Sequence[TableSpec], inp: InputSpec, budget: BudgetSpec | None
                  ) -> None:
    """Cross-field checks that need a parsed table: names, grids, budgets, output files."""
    files: dict[str, str] = {}
    for i, t in enumerate(tables):
        tp = f"tables[{i}]"
        for j, col in enumerate(t.by):
            if col in RESERVED_COLUMNS:
                _fail(f"{tp}.by[{j}]", f"key column {col!r} has the name of a column of the "
                                       f"public tables ({_names(RESERVED_COLUMNS[:9])}).",
                      "rename the column in the data and the spec (e.g. 'measure_code').")
        for j, r in enumerate(t.rollups):
            for k, col in enumerate(r.by):
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
            if r.direct:
                names.append(f"{t.name}__{r.label}_direct.parquet")
        for j, name in enumerate(names):
            if name in files:
                _fail(f"{tp}.rollups", f"two outputs would both be written to {name!r} "
                                       f"({files[name]} and this table's output #{j}).",
                      "rollup file names join the rollup columns with '_': choose rollups "
                      "whose names differ.")
            files[name] = tp


def _check_input_rules(tables: Sequence[TableSpec], inp: InputSpec) -> None:
    """Bounds name summed measures; author mode declares every data-quality rule."""
    summed = [m for t in tables if t.kind == "sum" for m in t.measures]
    row_id = RESERVED_COLUMNS[-1]
    if inp.unit == row_id or row_id in summed:
        _fail("input.unit" if inp.unit == row_id else "tables",
              f"{row_id!r} is the name of the row id tabdp assigns when each row is a unit.",
              "rename the column in the data and the spec.")
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
    if inp.mode != "author":
        return
    if inp.unit is not None and inp.unit_nulls == "error":
        _fail("input.unit_nulls", "is 'error' (the default), but in author mode (input.mode = "
                                  "\"author\") every data-quality rule is declared up front, so "
                                  "that no value in the data can stop the run.",
              'set input.unit_nulls = "drop".')
    if not summed:
        return  # a release of counts only reads no measure values
    why = ("in author mode (input.mode = \"author\") every data-quality rule is declared up "
           "front, so that no value in the data can stop the run")
    if inp.nulls == "error":
        _fail("input.nulls", f"is 'error' (the default), but {why}.",
              'set input.nulls = "zero" or "drop".')
    for i, t in enumerate(tables):
        if t.kind == "sum" and t.nulls == "error":
            _fail(f"tables[{i}].nulls", f"is 'error', but {why}.",
                  'set nulls = "zero" or "drop" (or remove it to use input.nulls).')
    if inp.negatives == "error":
        _fail("input.negatives", f"is 'error' (the default), but {why}.",
              'set input.negatives = "zero", "drop" or "allow" (signed measures, additive '
              "mechanisms only).")
    if inp.nonfinite == "error":
        _fail("input.nonfinite", f"is 'error' (the default), but {why}.",
              'set input.nonfinite = "drop", "zero" or "clamp".')
    missing = [m for m in dict.fromkeys(summed) if m not in inp.bounds]
    if missing:
        _fail("input.bounds", f"has no public bounds for measure(s) {_names(missing)}, but {why} "
                              "(a huge value must not be able to stop the release).",
              "add input.bounds = { " + ", ".join(f"{m} = [0, 1e10]" for m in missing)
              + " } with bounds known without looking at the data.")
    for i, t in enumerate(tables):
        if t.kind == "sum" and getattr(t.mechanism, "requires_nonnegative", False):
            signed = [m for m in t.measures if inp.bounds[m][0] < 0]
            if inp.negatives == "allow" and signed:
                _fail("input.negatives", f"is 'allow' and measure(s) {_names(signed)} may be "
                                         f"negative (input.bounds), but tables[{i}] uses "
                                         f"{type(t.mechanism).__name__}, which needs non-negative "
                                         f"contributions; {why}.",
                      'set input.negatives = "zero" or "drop", or lower bounds >= 0.')


def _check_paths(output: OutputSpec, inp: InputSpec, hierarchies: Mapping[str, Hierarchy],
                 raw_domains: Mapping[str, Any], domains: Mapping[str, pl.Series],
                 tables: Sequence[TableSpec], base: Path, spec_path: Path | None) -> None:
    """Output folders must not hold or sit inside anything the release reads."""
    read: list[tuple[str, Path]] = []
    src = str(inp.path)
    if inp.path is None:  # input.table: a catalog table, no path of ours
        pass
    elif "*" in src:
        prefix = src.split("*", 1)[0]
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
    for key in ("public", "confidential", "plan"):
        out = Path(getattr(output, key))
        for what, p in read:
            p = Path(os.path.abspath(p))
            if p == out or out in p.parents or (what == "input.path" and p in out.parents):
                _fail(f"output.{key}", f"the {key} folder {str(out)!r} overlaps {what} "
                                       f"({str(p)!r}): writing the release (or replacing it "
                                       "with --overwrite) would change what the release reads.",
                      "write the outputs to a folder of their own, outside the input.")


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


def _check_declared_columns(tables: Sequence[TableSpec], inp: InputSpec) -> None:
    """Author mode with a declared schema: the spec names only declared columns (text only)."""
    if not inp.schema:
        return
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


def parse_spec(data: Mapping[str, Any], base_dir: str | Path, *,
               path: Path | None = None, sha256: str | None = None,
               curator: CuratorConfig | None = None) -> ReleaseSpec:
    """Validate an already parsed spec (a dict as ``tomllib`` returns it).

    Nothing of the confidential input is read (it need not exist yet); the public metadata
    files it names (hierarchies, domain files, allowed keys) are read and checked.

    Args:
        data: The parsed TOML.
        base_dir: Folder that relative paths are resolved against.
        path: The spec file, if any.
        sha256: Hash of the file bytes, if any (else computed from canonical JSON of ``data``).
        curator: The curator's configuration: required in author mode (which then reads only
            the curator's datasets and public files, by name), optional otherwise.

    Returns:
        The validated [`ReleaseSpec`][tabdp.release.ReleaseSpec].

    Raises:
        SpecError: Any schema violation, with its key path.

    Example:
        >>> from pathlib import Path
        >>> import tabdp
        >>> data_dir = Path(tabdp.__file__).parents[1] / "data"
        >>> spec = parse_spec({
        ...     "release": {"name": "demo"},
        ...     "input": {"path": "cbp_sample.parquet", "unit": "estab_id"},
        ...     "hierarchies": {"geo": {"file": "hierarchies/geography.csv",
        ...                             "levels": ["state", "county"]}},
        ...     "output": {"public": "/tmp/demo/public", "confidential": "/tmp/demo/conf"},
        ...     "tables": [{"name": "estabs", "kind": "count", "by": ["county"],
        ...                 "rollups": [{"by": ["state"]}, {"by": [], "direct": True}]}],
        ... }, base_dir=data_dir)
        >>> spec.input.path == data_dir / "cbp_sample.parquet"
        True
        >>> table = spec.tables[0]
        >>> table.mechanism, [r.label for r in table.rollups], table.rollups[0].maps
        (DiscreteGaussian(sigma=2.0), ['state', 'national'], {'state': ('geo', 'county')})
        >>> spec.domains["state"].len(), spec.domains["county"].len()
        (10, 300)
        >>> data = dict(spec.raw, release={"name": "demo", "level": 1.5})
        >>> parse_spec(data, base_dir=data_dir)
        Traceback (most recent call last):
        ...
        tabdp.exceptions.SpecError: release.level: the confidence level must be a finite ...
        Hint: e.g. level = 0.9 for 90% margins of error.
    """
    base = Path(os.path.abspath(Path(base_dir).expanduser()))
    if not isinstance(data, Mapping):
        _fail("", f"a release spec must be a table; got {_show(data)} ({_tname(data)}).",
              "pass the dict tomllib returns.")
    if sha256 is None:
        canonical = json.dumps(data, sort_keys=True, default=str)
        sha256 = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    author = _author_mode(data)
    if curator is not None and curator.author_only and not author:
        _fail("input.mode", "must be \"author\": the curator configuration allows author-mode "
                            "specs only ([policy] author_only = true).",
              'set input.mode = "author" and name a dataset of the configuration '
              '(dataset = "<name>").')
    if author and curator is not None:
        data = _with_defaults(data, curator)
    d = _table(data, "", allowed=_ROOT_KEYS,
               required=[k for k in _ROOT_REQUIRED if not (author and k == "output")])
    release = _parse_release(d["release"])
    inp = _parse_input(d["input"], base, curator)
    token = _AUTHOR.set((curator, {}) if author and curator is not None else None)
    try:
        return _parse_rest(data, d, base, release, inp, path, sha256, curator)
    finally:
        _AUTHOR.reset(token)


def _parse_rest(data: Mapping[str, Any], d: Mapping[str, Any], base: Path,
                release: ReleaseInfo, inp: InputSpec, path: Path | None, sha256: str,
                curator: CuratorConfig | None) -> ReleaseSpec:
    """`parse_spec()` after ``[release]`` and ``[input]`` (author mode: names only)."""
    domains = _parse_domains(d["domains"], base) if "domains" in d else {}
    hierarchies = (_parse_hierarchies(d["hierarchies"], base, domains)
                   if "hierarchies" in d else {})
    budget = _parse_budget(d["budget"]) if "budget" in d else None
    if budget is not None and budget.max_left_out is not None and inp.mode == "author":
        _fail("budget.max_left_out", "max_left_out makes a run fail on what the budget left out "
              "of the data, so in author mode the run's outcome would depend on single records.",
              'remove budget.max_left_out from an author-mode spec (the curator sets it in a '
              'curator-mode spec), or use input.mode = "curator".')
    seed = _parse_seed(d["randomness"]) if "randomness" in d else None
    if inp.mode == "author":
        assert curator is not None  # _parse_input refuses author mode without it
        output = _author_output(d.get("output"), curator, release)
    else:
        output = _parse_output(d["output"], base)
    publication = (_parse_publication(d["publication"], "publication", Publication())
                   if "publication" in d else Publication())
    plan = _parse_plan(d["plan"]) if "plan" in d else PlanSpec()
    raw_tables = d.get("tables")
    if not isinstance(raw_tables, list) or not raw_tables:
        got = "nothing" if raw_tables is None else f"{_show(raw_tables)} ({_tname(raw_tables)})"
        _fail("tables", f"a release needs at least one [[tables]] entry; got {got}.",
              'add [[tables]] with name = "...", measures = [...], by = [...] and a mechanism.')
    tables: list[TableSpec] = []
    names: dict[str, int] = {}
    for i, raw in enumerate(raw_tables):
        table = _parse_table(raw, i, base, release, inp, domains, hierarchies, publication)
        if table.name in names:
            _fail(f"tables[{i}].name", f"table name {table.name!r} is already used by "
                                       f"tables[{names[table.name]}].",
                  "give every table a unique name (it names the output files).")
        names[table.name] = i
        tables.append(table)
    _check_tables(tables, inp, budget)
    _check_global_round(tables, raw_tables, publication, plan, release.level)
    _check_currencies(tables, budget)
    _check_input_rules(tables, inp)
    if inp.mode == "author":
        _check_declared_columns(tables, inp)
    _check_paths(output, inp, hierarchies, d.get("domains") or {}, domains, tables, base, path)
    return ReleaseSpec(path=path, sha256=sha256, raw=copy.deepcopy(dict(data)), release=release,
                       input=inp, domains=domains, hierarchies=hierarchies, budget=budget,
                       seed=seed, output=output, publication=publication, plan=plan,
                       tables=tuple(tables))
