"""The curator's configuration: what an author-mode spec may name, and where it is on the server.

In author mode (``input.mode = "author"``) the person who writes the spec may not see the
confidential data, nor choose server paths: the *curator* declares, in a TOML file of their own,
the datasets an author may query (each a name bound to a root that is read whole), the folders
of public metadata files (domains, key lists, hierarchies), the folder the releases are written
to, and defaults such as the budget. An author-mode spec then names a dataset and public files
**by name only** (docs/privacy-semantics.md, "The author/curator boundary"). The file is passed
to ``tabdp validate / plan / run`` with ``--curator CONFIG`` or the environment variable
``TABDP_CURATOR``.

The TOML schema (every key not listed is refused)::

    [datasets.cbp_2026]             # a dataset an author-mode spec may use:
                                    #   [input] dataset = "cbp_2026"
    path = "/srv/data/cbp/2026"     # a Parquet file, or a folder read WHOLE (recursive
                                    # *.parquet, hive partition folders become columns);
                                    # absolute or relative to this file's folder; no globs
    # table = "lake.cbp_2026"       # instead of path: a Spark catalog table (--engine spark)
    hive_partitioning = true        # optional bool (path only); default: automatic detection
    schema = { county = "String", payroll = "Float64" }
                                    # declared schema, column -> dtype name (String,
                                    # Boolean, Int8..Int64, UInt8..UInt64, Float32, Float64,
                                    # Date, Datetime = microseconds, no zone): required for
                                    # author-mode specs, which may name only these columns;
                                    # their types come from here, never from the files
    unit = "firm_id"                # optional: the privacy unit, fixed by the curator (an
                                    # author-mode spec leaves input.unit out, inheriting it,
                                    # or names exactly this column; anything else is refused)
    ledger = "/srv/tabdp/ledgers/cbp"   # optional: a lifetime ledger (`tabdp ledger init`)
                                    # charged by every run naming the dataset; needs `unit`

    [public]                        # required for specs that name metadata files
    folders = ["/srv/tabdp/metadata"]   # folders of public metadata files; an author spec names
                                    # a file by its NAME only (file = "naics2.csv"), looked up
                                    # in these folders in order

    [output]                        # required for author-mode runs
    root = "/srv/tabdp/releases"    # author-mode outputs go to
                                    # <root>/<release.name>/{public,confidential,plan}

    [defaults]                      # optional, for author-mode specs that do not set them
    budget = { rho = 2.0 }          # [budget] of a spec without one (same form as a spec's)
    level = 0.9                     # release.level of a spec without one
    delta = 1e-9                    # release.delta of a spec without one

    [engine]                        # optional
    spark_master = "yarn"           # the Spark master of author-mode runs with --engine
                                    # spark (an author-mode run may not pass --spark-master:
                                    # the author names no cluster); default local[2]

    [testing]                       # optional; never on a server authors use
    seeded_author_runs = false      # true: author-mode specs may set [randomness] seed (tests)
    [policy]                        # optional
    author_only = true              # every spec read with this configuration must be in author
                                    # mode (a validation server: an author cannot write
                                    # mode = "curator" to get paths back); default false
    author_specs = "/srv/tabdp/specs"   # optional, with author_only: the folder the server
                                    # writes authors' specs to; a spec path is then read only
                                    # if its real path is a regular file inside it (anything
                                    # else is "release spec file not found", not read); an
                                    # existing folder apart from the datasets, ledgers, public
                                    # folders and output root
    overwrite = "same-spec"         # what an author-mode --overwrite may replace under the
                                    # output root: "same-spec" (default; a release whose
                                    # manifest records this spec's hash), "any", "never"
    require_ledger = false          # true: an author-mode spec on a dataset without a ledger
                                    # is refused (recommended on a validation server)
    max_rho = 4.0                   # optional: the most per-record rho one author-mode run
                                    # may spend, over all its tables (its [budget] must be
                                    # given, or come from [defaults], and be within it)

Every path is resolved against the configuration file's folder. Errors name the key path and
may quote the configuration's own paths: the file is the curator's, and so are its messages
(`SpecError`, exit code 2 in the CLI).

Example:
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "curator.toml").write_text('''
    ... [datasets.cbp]
    ... path = "data/cbp"
    ... schema = { county = "String", payroll = "Float64" }
    ... [public]
    ... folders = ["metadata"]
    ... [output]
    ... root = "releases"
    ... ''')
    >>> config = load_curator_config(folder / "curator.toml")
    >>> config.datasets["cbp"].path == folder / "data" / "cbp"
    True
    >>> dict(config.datasets["cbp"].schema), config.output_root == folder / "releases"
    ({'county': 'String', 'payroll': 'Float64'}, True)
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import polars as pl

from tabdp._validation import first_fall
from tabdp.exceptions import LedgerError, PrivacyWarning, SpecError, warn_each_time

__all__ = ["CuratorConfig", "DatasetDecl", "load_curator_config", "parse_curator_config",
           "CURATOR_KEYS", "SCHEMA_DTYPES", "CURATOR_ENV", "OVERWRITE_POLICIES",
           "check_author_overwrite", "dataset_ledger_error", "dataset_ledger_warnings",
           "data_locations"]

#: The environment variable the CLI reads the configuration's path from when ``--curator`` is
#: not given.
CURATOR_ENV = "TABDP_CURATOR"

#: Every key the configuration accepts, by key path (``datasets.*`` is each dataset).
CURATOR_KEYS: dict[str, tuple[str, ...]] = {
    "": ("datasets", "public", "output", "defaults", "policy", "engine", "testing"),
    "datasets.*": ("path", "table", "hive_partitioning", "schema", "unit", "ledger"),
    "public": ("folders",),
    "output": ("root",),
    "defaults": ("budget", "level", "delta"),
    "policy": ("author_only", "author_specs", "overwrite", "require_ledger", "max_rho"),
    "engine": ("spark_master",),
    "testing": ("seeded_author_runs",),
}

#: ``[policy] overwrite``: what an author-mode ``--overwrite`` may replace under the output root.
OVERWRITE_POLICIES = ("same-spec", "any", "never")

#: Dtype names a declared schema may use, and their Polars types.
SCHEMA_DTYPES: dict[str, Any] = {
    "String": pl.String, "Boolean": pl.Boolean,
    "Int8": pl.Int8, "Int16": pl.Int16, "Int32": pl.Int32, "Int64": pl.Int64,
    "UInt8": pl.UInt8, "UInt16": pl.UInt16, "UInt32": pl.UInt32, "UInt64": pl.UInt64,
    "Float32": pl.Float32, "Float64": pl.Float64, "Date": pl.Date,
    # microseconds, no time zone: a file's other unit or zone is converted (the instant, in
    # UTC), so files written with different units concatenate (review R12)
    "Datetime": pl.Datetime("us"),
}

#: Declared dtypes a lifetime ledger can key units by (`tabdp.Ledger`: Int64 or String ids).
_LEDGER_UNIT_DTYPES = ("Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "String")

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_TABLE_REF = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+){0,2}$")
_GLOB = set("*?[]{}")


@dataclass(frozen=True)
class DatasetDecl:
    """One dataset of the curator's configuration (``[datasets.<name>]``).

    Attributes:
        name: The name an author-mode spec uses (``[input] dataset = "<name>"``).
        path: The absolute Parquet file or folder (read whole), or ``None`` for a catalog table.
        table: The Spark catalog table (``db.name``), or ``None`` for a path.
        hive_partitioning: Whether partition folders are columns (``None``: detected).
        schema: Declared column -> dtype name (`SCHEMA_DTYPES`); empty when undeclared.
        unit: The privacy unit's column fixed by the curator (public), or ``None``: an
            author-mode spec then chooses (each row a record unless it names a unit).
        ledger: The lifetime ledger (absolute folder) every run naming the dataset is charged
            to, or ``None``.

    Example:
        >>> d = DatasetDecl("cbp", Path("/srv/cbp"), None, None, {"payroll": "Float64"})
        >>> d.polars_schema()
        Schema([('payroll', Float64)])
    """

    name: str
    path: Path | None
    table: str | None
    hive_partitioning: bool | None = None
    schema: Mapping[str, str] = field(default_factory=dict)
    unit: str | None = None
    ledger: Path | None = None

    def polars_schema(self) -> pl.Schema:
        """The declared schema as a Polars schema (empty when none is declared).

        Returns:
            Column -> Polars dtype, in the declared order.

        Example:
            >>> DatasetDecl("x", None, "db.x", None, {"n": "Int64"}).polars_schema()
            Schema([('n', Int64)])
        """
        return pl.Schema({c: SCHEMA_DTYPES[t] for c, t in self.schema.items()})


@dataclass(frozen=True)
class CuratorConfig:
    """The curator's configuration (see the module docstring for the file format).

    Attributes:
        path: The configuration file (absolute), or ``None`` when built from a dict.
        datasets: Name -> `DatasetDecl`.
        public_folders: Absolute folders of public metadata files, searched in order.
        output_root: Absolute folder author-mode releases are written under, or ``None``.
        defaults: Validated defaults: ``"budget"`` (a spec's ``[budget]`` table), ``"level"``,
            ``"delta"`` (those present only).
        author_only: Every spec read with this configuration must be in author mode.
        overwrite: What ``--overwrite`` may replace under the output root in author mode
            (`OVERWRITE_POLICIES`): ``"same-spec"`` (default) a release of the same spec
            only, ``"any"`` any release, ``"never"`` none.

    Example:
        >>> c = parse_curator_config({"datasets": {"d": {"path": "/srv/d.parquet"}}}, "/")
        >>> c.datasets["d"].path, c.public_folders, c.output_root
        (PosixPath('/srv/d.parquet'), (), None)
    """

    path: Path | None
    datasets: Mapping[str, DatasetDecl]
    public_folders: tuple[Path, ...] = ()
    output_root: Path | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    author_only: bool = False
    overwrite: str = "same-spec"
    #: ``[testing] seeded_author_runs``: author-mode specs may set ``[randomness] seed`` (tests
    #: of the boundary only: an author who chooses the seed can redraw the noise and remove it).
    seeded_author_runs: bool = False
    #: ``[policy] require_ledger``: an author-mode spec on a dataset without a ``ledger`` is
    #: refused (every author run is then charged to a lifetime ledger).
    require_ledger: bool = False
    #: ``[policy] max_rho``: the most per-record ρ one author-mode run may spend over all its
    #: tables; an author-mode spec's budget must provably stay within it (checked from the
    #: text, before anything is read). ``None``: no cap beyond the spec's own budget.
    max_rho: float | None = None
    #: ``[policy] author_specs``: the folder (absolute) a server writes its authors' specs to.
    #: Under ``author_only``, a spec path is read only if its real path is a regular file
    #: inside it; any other path is "release spec file not found", whether or not it exists,
    #: and is not read. ``None``: any path outside the datasets, ledgers and output root.
    author_specs: Path | None = None
    #: ``[engine] spark_master``: the Spark master of author-mode runs with ``--engine spark``
    #: (an author-mode ``tabdp run`` may not name one: ``--spark-master`` is refused).
    #: ``None``: tabdp's default (``local[2]``).
    spark_master: str | None = None

    def dataset_roots(self) -> tuple[Path, ...]:
        """The datasets' paths with symbolic links resolved (what no public file may be in).

        Returns:
            One resolved path per dataset declared by a path.

        Example:
            >>> c = parse_curator_config({"datasets": {"d": {"path": "/srv/d"}}}, "/")
            >>> [str(p) for p in c.dataset_roots()]
            ['/srv/d']
        """
        return tuple(Path(os.path.realpath(d.path)) for d in self.datasets.values()
                     if d.path is not None)


def _fail(path: str, message: str, hint: str) -> NoReturn:
    raise SpecError(f"curator config: {path}" if path else "curator config",
                    f"{message}\nHint: {hint}")


def _table(value: Any, path: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        _fail(path, f"must be a table; got {value!r} ({type(value).__name__}).",
              f"write [{path or 'datasets.<name>'}] with keys {', '.join(allowed)}.")
    for key in value:
        if key not in allowed:
            _fail(f"{path}.{key}" if path else str(key),
                  f"unknown key {key!r}; allowed: {', '.join(allowed)}.",
                  "remove or rename it (the format is in the docstring of "
                  "tabdp.release.curator_config).")
    return value


def _folder(value: Any, path: str, base: Path, what: str) -> Path:
    if not isinstance(value, str) or not value or "\x00" in value:
        _fail(path, f"{what} must be a non-empty path string; got {value!r}.",
              "an absolute path, or one relative to the configuration file's folder.")
    if any(ch in _GLOB for ch in value):
        _fail(path, f"{what} {value!r} contains a glob character ({' '.join(sorted(_GLOB))}).",
              "name one file or folder: a folder is read whole.")
    p = Path(value).expanduser()
    return Path(os.path.normpath(p if p.is_absolute() else base / p))


def _dataset(name: Any, raw: Any, base: Path) -> DatasetDecl:
    dp = f"datasets.{name}"
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        _fail(dp, f"dataset name {name!r} is not allowed: use letters, digits, '_', '-', '.'.",
              "rename the dataset, e.g. [datasets.cbp_2026].")
    d = _table(raw, dp, CURATOR_KEYS["datasets.*"])
    if ("path" in d) == ("table" in d):
        _fail(dp, f"needs exactly one of 'path' and 'table'; got "
                  f"{'both' if 'path' in d else 'neither'}.",
              'path = "/srv/data/cbp" (Parquet) or table = "lake.cbp" (Spark catalog).')
    path = table = None
    if "path" in d:
        path = _folder(d["path"], f"{dp}.path", base, "the dataset path")
    else:
        table = d["table"]
        if not isinstance(table, str) or not _TABLE_REF.fullmatch(table):
            _fail(f"{dp}.table", f"must be one to three names (letters, digits, '_') separated "
                                 f"by dots; got {table!r}.", 'e.g. table = "lake.cbp_2026".')
    hive = None
    if "hive_partitioning" in d:
        if path is None:
            _fail(f"{dp}.hive_partitioning", "applies to a path, not to a catalog table.",
                  "remove it: the catalog knows the table's partitions.")
        hive = d["hive_partitioning"]
        if not isinstance(hive, bool):
            _fail(f"{dp}.hive_partitioning", f"must be true or false; got {hive!r}.",
                  "true, false, or omit it for automatic detection.")
    schema: dict[str, str] = {}
    if "schema" in d:
        raw_schema = d["schema"]
        if not isinstance(raw_schema, Mapping) or not raw_schema:
            _fail(f"{dp}.schema", f"must be a non-empty table column = \"dtype\"; got "
                                  f"{raw_schema!r}.", 'e.g. schema = { payroll = "Float64" }.')
        for col, dtype in raw_schema.items():
            if dtype not in SCHEMA_DTYPES:
                _fail(f"{dp}.schema.{col}", f"unknown dtype {dtype!r}; allowed: "
                                            f"{', '.join(SCHEMA_DTYPES)}.",
                      'use a Polars dtype name, e.g. "String", "Int64" or "Float64".')
            schema[str(col)] = dtype
    unit = ledger = None
    if "unit" in d:
        unit = d["unit"]
        if not isinstance(unit, str) or not unit.strip():
            _fail(f"{dp}.unit", f"must be a column name; got {unit!r}.",
                  'name the privacy-unit column, e.g. unit = "firm_id".')
        if schema and unit not in schema:
            _fail(f"{dp}.unit", f"the unit column {unit!r} is not in the declared schema "
                                f"({', '.join(schema)}).",
                  f'declare it too, e.g. schema = {{ {unit} = "Int64", ... }}.')
    if "ledger" in d:
        ledger = _folder(d["ledger"], f"{dp}.ledger", base, "the ledger folder")
        if unit is None:
            _fail(f"{dp}.ledger", "a lifetime ledger is kept per unit, but the dataset declares "
                                  "no unit: each author's choice would decide what a unit is.",
                  'add unit = "<stable id column>" (e.g. "estab_id") to the dataset.')
        kind = schema.get(unit)
        if kind is not None and kind not in _LEDGER_UNIT_DTYPES:
            # review R15: else every run failed after reading the data (the generic failure,
            # exit 4), decided by the declared type alone
            _fail(f"{dp}.schema.{unit}", f"the unit column {unit!r} is declared {kind!r}, but a "
                                         "lifetime ledger keys units by an integer id that fits "
                                         "Int64, or by text.",
                  f'declare it as one of {", ".join(_LEDGER_UNIT_DTYPES)} (the same type in '
                  "every run of the series).")
    return DatasetDecl(name=name, path=path, table=table, hive_partitioning=hive, schema=schema,
                       unit=unit, ledger=ledger)


def _number(value: Any, path: str, hint: str, lo: float = 0.0, hi: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not (lo < float(value) < hi):
        _fail(path, f"must be a number in ({lo:g}, {hi:g}); got {value!r}.", hint)
    return float(value)


def _defaults(raw: Any) -> dict[str, Any]:
    d = _table(raw, "defaults", CURATOR_KEYS["defaults"])
    out: dict[str, Any] = {}
    if "budget" in d:
        budget = d["budget"]
        hint = ('a spec\'s [budget] table: budget = { rho = 2.0 }, or a curve '
                'budget = { rho = { "1e3" = 0.5, "1e7" = 10.0 } }.')
        b = _table(budget, "defaults.budget", ("rho",))
        rho = b.get("rho")
        values = list(rho.values()) if isinstance(rho, Mapping) and rho else [rho]
        sizes = list(rho) if isinstance(rho, Mapping) else []
        for size in sizes:
            try:
                ok = float(size) > 0 and math.isfinite(float(size))
            except (TypeError, ValueError):
                ok = False
            if not ok:
                _fail("defaults.budget.rho", f"curve key {size!r} is not a record size > 0.",
                      hint)
        for v in values:
            _number(v, "defaults.budget.rho", hint)
        # as a spec's curve is checked when it is read (a larger unit may not get a smaller
        # budget; one entry per size): here, so that a spec taking this default is not
        # refused at a key it does not have (review rev66x: an author-mode spec without
        # [budget] got "budget.rho.1e7: the budget curve falls with the size")
        pts = sorted((float(k), float(v), str(k)) for k, v in rho.items()) \
            if isinstance(rho, Mapping) else []
        for (s0, _, k0), (s1, _, k1) in zip(pts, pts[1:], strict=False):
            if s1 == s0:
                _fail(f"defaults.budget.rho.{k1}", f"size {k1!r} = {s1:g} is given twice in "
                                                   f"the default budget curve (also as {k0!r}).",
                      "keep one entry per size.")
        if (fall := first_fall(pts)) is not None:
            (_, r0, k0), (_, r1, k1) = fall
            _fail(f"defaults.budget.rho.{k1}",
                  f"the default budget curve falls with the size: {r1:g} at size {k1!r} is "
                  f"below {r0:g} at the smaller size {k0!r} (a larger unit may not get a "
                  "smaller budget).",
                  'give larger sizes larger (or equal) limits, e.g. budget = { rho = { '
                  '"1e3" = 0.5, "1e7" = 10.0 } }.')
        out["budget"] = dict(budget)
    if "level" in d:
        out["level"] = _number(d["level"], "defaults.level", "e.g. level = 0.9.", 0.0, 1.0)
    if "delta" in d:
        out["delta"] = _number(d["delta"], "defaults.delta", "e.g. delta = 1e-9.", 0.0, 1.0)
        from tabdp.privacy.conversions import statement_delta_problem

        if (why := statement_delta_problem(out["delta"])) is not None:
            _fail("defaults.delta", f"{why}.", "use a δ far below 1 / (the number of units), "
                                               "e.g. delta = 1e-9.")
    return out


def parse_curator_config(data: Mapping[str, Any], base_dir: str | Path, *,
                         path: Path | None = None) -> CuratorConfig:
    """Validate a parsed configuration (a dict as ``tomllib`` returns it).

    No data is read, and the paths need not exist yet, except ``[policy] author_specs``: an
    existing folder (checked here).

    Args:
        data: The parsed TOML.
        base_dir: Folder that relative paths are resolved against.
        path: The configuration file, if any.

    Returns:
        The validated `CuratorConfig`.

    Raises:
        SpecError: An unknown key or a bad value (the message names the key path).

    Example:
        >>> parse_curator_config({"datasets": {"d": {"path": "d/*.parquet"}}}, "/srv")
        Traceback (most recent call last):
        ...
        tabdp.exceptions.SpecError: curator config: datasets.d.path: the dataset path ...
        Hint: name one file or folder: a folder is read whole.
    """
    base = Path(os.path.abspath(Path(base_dir).expanduser()))
    d = _table(data, "", CURATOR_KEYS[""])
    datasets: dict[str, DatasetDecl] = {}
    raw_sets = d.get("datasets", {})
    if not isinstance(raw_sets, Mapping):
        _fail("datasets", f"must be a table of named datasets; got {raw_sets!r}.",
              '[datasets.cbp_2026] with path = "...".')
    for name, raw in raw_sets.items():
        datasets[name] = _dataset(name, raw, base)
    folders: tuple[Path, ...] = ()
    if "public" in d:
        p = _table(d["public"], "public", CURATOR_KEYS["public"])
        raw_folders = p.get("folders", [])
        if not isinstance(raw_folders, list):
            _fail("public.folders", f"must be an array of folder paths; got {raw_folders!r}.",
                  'e.g. folders = ["/srv/tabdp/metadata"].')
        folders = tuple(_folder(f, f"public.folders[{i}]", base, "the public folder")
                        for i, f in enumerate(raw_folders))
    root = None
    if "output" in d:
        o = _table(d["output"], "output", CURATOR_KEYS["output"])
        if "root" in o:
            root = _folder(o["root"], "output.root", base, "the output root")
    defaults = _defaults(d["defaults"]) if "defaults" in d else {}
    author_only = False
    overwrite = "same-spec"
    if "policy" in d:
        pol = _table(d["policy"], "policy", CURATOR_KEYS["policy"])
        author_only = pol.get("author_only", False)
        if not isinstance(author_only, bool):
            _fail("policy.author_only", f"must be true or false; got {author_only!r}.",
                  "true on a validation server (every spec in author mode), else false.")
        overwrite = pol.get("overwrite", overwrite)
        if overwrite not in OVERWRITE_POLICIES:
            _fail("policy.overwrite", f"must be one of {', '.join(map(repr, OVERWRITE_POLICIES))}"
                                      f"; got {overwrite!r}.",
                  '"same-spec" (default: --overwrite replaces a release of the same spec '
                  'only), "any" or "never".')
    author_specs = None
    if "policy" in d and "author_specs" in d["policy"]:
        author_specs = _folder(d["policy"]["author_specs"], "policy.author_specs", base,
                               "the folder of the authors' specs")
        if not author_only:
            _fail("policy.author_specs", "applies to a server for authors only, and "
                                         "[policy] author_only is not true: any spec could "
                                         "then be in curator mode and name any server path.",
                  "set author_only = true in [policy] too, or remove author_specs.")
    require_ledger = False
    if "policy" in d:
        require_ledger = d["policy"].get("require_ledger", False)
        if not isinstance(require_ledger, bool):
            _fail("policy.require_ledger", f"must be true or false; got {require_ledger!r}.",
                  "true on a validation server (every author run charged to a lifetime "
                  "ledger), else false.")
    max_rho = None
    if "policy" in d and "max_rho" in d["policy"]:
        max_rho = _number(d["policy"]["max_rho"], "policy.max_rho",
                          "a per-record zCDP cap > 0 on one author-mode run, e.g. max_rho = 4.0.")
        if not max_rho > 0.0:
            _fail("policy.max_rho", f"must be > 0; got {max_rho!r}.",
                  "a per-record zCDP cap > 0 on one author-mode run, e.g. max_rho = 4.0.")
    spark_master = None
    if "engine" in d:
        eng = _table(d["engine"], "engine", CURATOR_KEYS["engine"])
        if "spark_master" in eng:
            spark_master = eng["spark_master"]
            if not isinstance(spark_master, str) or not spark_master.strip() or any(
                    ord(ch) < 32 for ch in spark_master):
                _fail("engine.spark_master", f"must be a Spark master URL; got "
                                             f"{spark_master!r}.",
                      'e.g. spark_master = "yarn" or "spark://host:7077".')
    seeded = False
    if "testing" in d:
        tst = _table(d["testing"], "testing", CURATOR_KEYS["testing"])
        seeded = tst.get("seeded_author_runs", False)
        if not isinstance(seeded, bool):
            _fail("testing.seeded_author_runs", f"must be true or false; got {seeded!r}.",
                  "false (the default) on any server authors use; true only in tests.")
    config = CuratorConfig(path=path, datasets=datasets, public_folders=folders,
                           output_root=root, defaults=defaults, author_only=author_only,
                           overwrite=overwrite, seeded_author_runs=seeded,
                           require_ledger=require_ledger, max_rho=max_rho,
                           spark_master=spark_master, author_specs=author_specs)
    found = _check_ledgers(config)
    if author_specs is not None:
        _check_author_specs(config, author_specs, found)
    roots = config.dataset_roots()
    for i, f in enumerate(folders):
        real = Path(os.path.realpath(f))
        for name, r in zip((n for n, x in datasets.items() if x.path is not None), roots,
                           strict=True):
            if real == r or r in real.parents or real in r.parents:
                _fail(f"public.folders[{i}]", f"the public folder {str(f)!r} overlaps dataset "
                                              f"{name!r} ({str(r)!r}).",
                      "keep public metadata files in folders of their own, apart from the "
                      "confidential data.")
        if root is not None:
            out = Path(os.path.realpath(root))
            if out == real or real in out.parents or out in real.parents:
                _fail("output.root", f"the output root {str(root)!r} overlaps the public "
                                     f"folder {str(f)!r}.", "use separate folders.")
    if root is not None:
        out = Path(os.path.realpath(root))
        for name, r in zip((n for n, x in datasets.items() if x.path is not None), roots,
                           strict=True):
            if out == r or r in out.parents or out in r.parents:
                _fail("output.root", f"the output root {str(root)!r} overlaps dataset "
                                     f"{name!r} ({str(r)!r}).", "use separate folders.")
    return config


def data_locations(path: str | os.PathLike[str]) -> list[Path]:
    """Where a dataset's data really lies: its path and the targets of links inside it.

    A folder is read whole and readers follow symbolic links, so a folder holding a link to
    another dataset's file or folder reads that data too (review R13). Resolved real paths:
    the dataset's own, then each link's target found below it (links are not descended).

    Args:
        path: A dataset's file or folder.

    Returns:
        Real paths, the dataset's own first.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> (d / "a").mkdir(); (d / "b").mkdir()
        >>> (d / "b" / "x.parquet").symlink_to(d / "a")
        >>> [p.name for p in data_locations(d / "b")]
        ['b', 'a']
    """
    own = Path(os.path.realpath(path))
    out = [own]
    if not own.is_dir():
        return out
    # every command under [policy] author_only walks each dataset (review rev62b): one
    # scandir per folder and the entries' types, no stat per file (a hive folder of 20,000
    # files: 0.015 s instead of 0.24 s with os.walk and a lstat per entry)
    stack = [own]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:  # as os.walk: a folder that cannot be listed is skipped
            continue
        with entries:
            for entry in entries:
                if entry.is_symlink():
                    out.append(Path(os.path.realpath(entry.path)))
                elif entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
    return out


def _check_ledgers(config: CuratorConfig) -> dict[str, list[Path] | str]:
    """Each dataset's ledger: outside every dataset, public folder and the output root.

    Datasets over the same data (the same or nested paths, the same table) must have the same
    unit and ledger: otherwise an author would name the one without a ledger (or with a finer
    unit) and step around the other's. Datasets sharing one ledger must declare the same unit
    column with the same declared type.

    Returns:
        Dataset name -> where its data lies (`data_locations`, or the catalog table's name):
        each dataset walked once for every check of the configuration.
    """
    def where(x: DatasetDecl) -> list[Path] | str:
        if x.path is not None:
            return data_locations(x.path)
        # Spark's catalog names are case-insensitive, and spark_catalog is its default
        # catalog: "lake.firms", "LAKE.Firms" and "spark_catalog.lake.firms" are one table
        table = str(x.table).lower()
        return table.removeprefix("spark_catalog.") if table.count(".") == 2 else table

    def ledger_of(x: DatasetDecl) -> Path | None:
        return None if x.ledger is None else Path(os.path.realpath(x.ledger))

    items = list(config.datasets.items())
    # each dataset's locations once (review rev62b: a walk of every dataset per pair, n² walks)
    found = {name: where(x) for name, x in items}
    for i, (a_name, a) in enumerate(items):
        for b_name, b in items[i + 1:]:
            wa, wb = found[a_name], found[b_name]
            same = wa == wb if isinstance(wa, str) or isinstance(wb, str) else any(
                pa == pb or pa in pb.parents or pb in pa.parents for pa in wa for pb in wb)
            if same and (a.unit != b.unit or ledger_of(a) != ledger_of(b)):
                _fail(f"datasets.{b_name}", f"reads the same data as dataset {a_name!r} (the "
                                            "same or nested path or table) with another "
                                            f"unit or ledger (unit {b.unit!r} vs {a.unit!r}).",
                      "give both the same unit and ledger (an author would name the dataset "
                      "with the weaker accounting), or declare the data once.")
    for i, (a_name, a) in enumerate(items):
        for b_name, b in items[i + 1:]:
            # one ledger keeps one account per unit value: datasets charging it must agree on
            # what a unit is, its column and its type (the text "7" and the integer 7 would
            # be two accounts, each with the whole lifetime budget)
            if ledger_of(a) is None or ledger_of(a) != ledger_of(b):
                continue
            ta, tb = a.schema.get(a.unit or ""), b.schema.get(b.unit or "")
            if a.unit != b.unit or ta != tb:
                _fail(f"datasets.{b_name}.ledger",
                      f"datasets {a_name!r} and {b_name!r} share one lifetime ledger but "
                      f"declare different units (dataset {a_name!r}: unit {a.unit!r} of "
                      f"type {ta}; dataset {b_name!r}: unit {b.unit!r} of type {tb}); a "
                      "ledger keeps one account per unit, so a unit would be charged "
                      "separately through each dataset.",
                      "declare the same unit column with the same type in their schemas, "
                      "or give each dataset a ledger of its own.")
    others: list[tuple[str, Path]] = [(f"dataset {n!r}", Path(os.path.realpath(x.path)))
                                      for n, x in config.datasets.items() if x.path is not None]
    others += [("the public folder", Path(os.path.realpath(f))) for f in config.public_folders]
    if config.output_root is not None:
        others.append(("the output root", Path(os.path.realpath(config.output_root))))
    for name, decl in config.datasets.items():
        if decl.ledger is None:
            continue
        led = Path(os.path.realpath(decl.ledger))
        for what, r in others:
            if led == r or r in led.parents or led in r.parents:
                _fail(f"datasets.{name}.ledger", f"the ledger {str(decl.ledger)!r} overlaps "
                                                 f"{what} ({str(r)!r}).",
                      "keep each ledger in a confidential folder of its own (a ledger holds "
                      "per-unit losses; a dataset folder is read whole).")
    return found


def _check_author_specs(config: CuratorConfig, folder: Path,
                        found: Mapping[str, list[Path] | str]) -> None:
    """``[policy] author_specs``: an existing folder apart from every confidential location.

    Specs are read from it by any author who names them, so it may hold nothing else: it must
    not overlap a dataset (or a link's target in one), a ledger (nor so hold its anchor), a
    public folder or the output root, nor hold the configuration file.
    """
    real = Path(os.path.realpath(folder))
    if not real.is_dir():
        _fail("policy.author_specs", f"the folder of the authors' specs {str(folder)!r} is "
                                     f"{'not a folder' if real.exists() else 'missing'}.",
              "create it (the server writes each author's spec there), or fix the path.")
    others: list[tuple[str, Path]] = [
        (f"dataset {name!r}", p) for name, where in found.items() if not isinstance(where, str)
        for p in where]
    others += [(f"the ledger of dataset {n!r}", Path(os.path.realpath(x.ledger)))
               for n, x in config.datasets.items() if x.ledger is not None]
    others += [(f"the public folder {str(f)!r}", Path(os.path.realpath(f)))
               for f in config.public_folders]
    if config.output_root is not None:
        others.append(("the output root", Path(os.path.realpath(config.output_root))))
    for what, r in others:
        if real == r or r in real.parents or real in r.parents:
            _fail("policy.author_specs", f"the folder of the authors' specs {str(folder)!r} "
                                         f"overlaps {what} ({str(r)!r}).",
                  "give the authors' specs a folder of their own, apart from the data, "
                  "ledgers, public folders and output root (a spec there is read by any "
                  "author who names it).")
    # (a ledger's anchor lies beside its folder: a folder holding it holds the ledger too)
    conf = Path(os.path.realpath(config.path)) if config.path is not None else None
    if conf is not None and real in conf.parents:
        _fail("policy.author_specs", f"the folder of the authors' specs {str(folder)!r} "
                                     f"holds the curator configuration ({str(conf)!r}).",
              "give the authors' specs a folder of their own (a file there is read as a "
              "spec by any author who names it).")


def load_curator_config(path: str | Path) -> CuratorConfig:
    r"""Read and validate the curator's configuration file (TOML).

    Args:
        path: The file.

    Returns:
        The validated `CuratorConfig`.

    Raises:
        SpecError: The file is missing, not TOML, or breaks the format (the message names the
            key path; it may quote the configuration's paths, which are the curator's own).

    Example:
        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "curator.toml"
        >>> _ = f.write_text('[datasets.d]\npath = "d.parquet"\nsize = 3\n')
        >>> try:
        ...     load_curator_config(f)
        ... except ValueError as err:
        ...     print(str(err).splitlines()[0][:53])
        curator config: datasets.d.size: unknown key 'size';
    """
    file = Path(os.path.abspath(Path(path).expanduser()))
    try:
        content = file.read_bytes()
    except OSError as err:
        _fail("", f"cannot read the curator configuration {str(file)!r}: "
                  f"{err.strerror or err}.",
              "pass the curator's TOML file with --curator CONFIG (or TABDP_CURATOR).")
    try:
        data = tomllib.loads(content.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        _fail("", f"{str(file)!r} is not valid UTF-8 TOML: {err}.", "fix the syntax.")
    return parse_curator_config(data, file.parent, path=file)


def check_author_overwrite(spec: Any, config: CuratorConfig | None) -> None:
    """Author mode, ``--overwrite``: refuse to replace a release of another spec.

    Under the curator's output root, each author-mode release has the folder named by its
    ``release.name``, so two authors choosing the same name (or, on a case-insensitive file
    system, names differing in case only) share a folder, and ``--overwrite`` would let one
    replace the other's published outputs. The rule (``[policy] overwrite``): ``"same-spec"``
    (default) replaces a release whose public ``manifest.json`` records the same spec hash
    (``spec.sha256_redacted``: the spec without its seed), so an author may re-run their own
    spec; ``"any"`` replaces any; ``"never"`` none. A release folder without a public release
    (a failed run leaves its confidential ``failure.json`` only) is no one's publication and
    may be replaced. Decided from the release folders alone: nothing of the data is read.

    Args:
        spec: The loaded author-mode `ReleaseSpec` (``output.public`` under the root).
        config: The curator configuration (``None``: nothing to check).

    Raises:
        SpecError: The release folder holds another spec's release (or one whose manifest
            cannot be read) and the policy does not allow replacing it. The message names
            the folder as ``<release.name> under the curator's output root``.

    Example:
        >>> import json, tempfile, types
        >>> root = Path(tempfile.mkdtemp())
        >>> cfg = parse_curator_config({"datasets": {}, "output": {"root": str(root)}}, "/")
        >>> pub = root / "r" / "public"
        >>> pub.mkdir(parents=True)
        >>> _ = (pub / "manifest.json").write_text(json.dumps(
        ...     {"spec": {"sha256_redacted": "abc"}}))
        >>> mine = types.SimpleNamespace(public_sha256="abc", release=types.SimpleNamespace(
        ...     name="r"), output=types.SimpleNamespace(public=pub),
        ...     input=types.SimpleNamespace(mode="author"))
        >>> check_author_overwrite(mine, cfg)            # the same spec: allowed
        >>> other = types.SimpleNamespace(**{**vars(mine), "public_sha256": "def"})
        >>> try:
        ...     check_author_overwrite(other, cfg)
        ... except ValueError as err:
        ...     print(str(err).split(":")[1].strip()[:40])
        the release folder 'r' under the curator
    """
    if config is None or spec.input.mode != "author" or config.overwrite == "any":
        return
    public = Path(spec.output.public)
    if not public.exists():
        return  # no release published there (a failed run's folder is no one's release)
    where = f"{spec.release.name!r} under the curator's output root"
    if config.overwrite == "never":
        raise SpecError("release.name", f"the release folder {where} already holds a "
                                        "release, and the curator's configuration allows "
                                        "no --overwrite in author mode ([policy] overwrite = "
                                        "\"never\"). Nothing was read or written.\nHint: "
                                        "give the release a new name (release.name).")
    try:
        import json

        owner = json.loads((public / "manifest.json").read_text("utf-8"))["spec"][
            "sha256_redacted"]
    except (OSError, ValueError, KeyError, TypeError):
        owner = None
    if owner != spec.public_sha256:
        raise SpecError("release.name", f"the release folder {where} holds the release of "
                                        "another spec (its manifest records another spec "
                                        "hash), and --overwrite replaces only a release of "
                                        "the same spec in author mode ([policy] overwrite = "
                                        "\"same-spec\"): one author cannot replace another's "
                                        "published outputs. Nothing was read or written.\n"
                                        "Hint: give the release a new name (release.name), or "
                                        "ask the curator to remove the old release.")


def dataset_ledger_error(dataset: str, err: Exception) -> LedgerError:
    """A curator-configured ledger's refusal, in words an author may read (no server path).

    The ledger's own message (its path, the lock's owner, what did not verify) is the
    curator's: ``tabdp ledger verify`` gives it to them.

    Args:
        dataset: The dataset's name in the curator's configuration (public to its authors).
        err: The ledger's own error (confidential: it may quote the ledger's path).

    Returns:
        A ``LedgerError`` naming the dataset only (``busy`` kept).

    Example:
        >>> from tabdp.exceptions import LedgerError
        >>> e = dataset_ledger_error("cbp", LedgerError("/srv/l is locked", busy=True))
        >>> "/srv" in str(e), e.busy
        (False, True)
    """
    if getattr(err, "busy", False):
        return LedgerError(
            f"the lifetime ledger of dataset {dataset!r} is in use by another run; two runs "
            "against one ledger at once could lose an update, so this run was refused before "
            "reading any data. Nothing was read or written.\nHint: run again when the other "
            "run has finished.", busy=True)
    return LedgerError(
        f"the lifetime ledger of dataset {dataset!r} cannot be used (it is missing or does not "
        "verify; the details are the curator's), so this run was refused before reading any "
        "data. Nothing was read or written.\nHint: ask the curator to check the dataset's "
        "ledger (tabdp ledger verify).")


def dataset_ledger_notice(dataset: str) -> str:
    """The words an author may read for one anchor notice of a dataset's ledger.

    Args:
        dataset: The dataset's name in the curator's configuration (public to its authors).

    Returns:
        The notice, naming the dataset only (never the ledger's path).

    Example:
        >>> "'cbp'" in dataset_ledger_notice("cbp")
        True
    """
    return (f"the lifetime ledger of dataset {dataset!r}: its anchor (the record of its last "
            "release kept next to it) was missing or replaced, and was brought up to date; "
            "the details are the curator's.\nHint: the curator checks the dataset's ledger "
            "(tabdp ledger verify).")


def dataset_ledger_warnings(dataset: str, notices: Sequence[str],
                            into: list[tuple[type[Warning], str]] | None = None) -> None:
    """A curator-configured ledger's anchor notices, in words an author may read.

    The ledger's own notices (an anchor written for a ledger that had none, an accepted
    restore) quote its server path: each is passed on as a `PrivacyWarning` naming the dataset
    only. ``tabdp ledger verify`` gives the curator the details. The notices are those of the
    opening itself (`tabdp.Ledger.open` with ``_quiet=True``, its ``open_warnings`` or
    ``_notes``), never warnings recorded while it ran: recording is process-wide, and would
    turn another thread's `PrivacyWarning` (perhaps about its data) into an author-visible one.

    Args:
        dataset: The dataset's name in the curator's configuration (public to its authors).
        notices: The ledger's opening notices (confidential: they quote its path).
        into: Given: each ``(PrivacyWarning, text)`` is appended here instead of warned (the
            caller shows them itself: ``tabdp run``).

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as got:
        ...     warnings.simplefilter("always")
        ...     dataset_ledger_warnings("cbp", ["/srv/l had no anchor"])
        >>> "/srv" in str(got[0].message), "'cbp'" in str(got[0].message)
        (False, True)
    """
    for _ in notices:  # each time (the default filter would show this text once per line)
        if into is not None:
            into.append((PrivacyWarning, dataset_ledger_notice(dataset)))
        else:
            warn_each_time(dataset_ledger_notice(dataset), PrivacyWarning, stacklevel=3)
