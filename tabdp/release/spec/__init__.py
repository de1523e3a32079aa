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

The package is split by stage: `model` (the frozen dataclasses of a validated spec), `schema`
(the keys and values allowed, the typed getters), `files` (paths and the public metadata files),
`sections` and `tables` (the parsers), `checks` (cross-field checks) and `load` (`load_spec`,
`parse_spec`). Every public name is importable from ``tabdp.release.spec``.

The TOML schema (every key not listed is refused)::

    [release]                       # required
    name = "cbp_sample"             # required: letters, digits, '_', '-', '.'
    title = "County Business Patterns (sample)"        # optional
    description = "..."             # optional
    level = 0.9                     # optional: confidence level of margins of error, in (0, 1)
    delta = 1e-9                    # optional: δ of the (ε, δ) statements in the reports, in
                                    # (0, 1e-3] (larger is refused)

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
                                    # (a dataset whose curator fixes `unit`: omitted inherits
                                    # it; any other column is refused)
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

    [hierarchies.grouping]          # optional: an ALTERNATIVE hierarchy sharing levels with
    file = "sector_groups.csv"      # another (e.g. a custom grouping of the same naics6
    levels = ["group", "naics6"]    # codes): each shared level must have the same codes, of
                                    # the same type, in both files, and shared levels map alike;
                                    # rollups reach the levels of both; a consistent table
                                    # uses one of them per classification

    [budget]                        # optional: per-record limit on the total PRzCDP ρ
    rho = 2.0                       # a number, or a curve {"1e3" = 0.5, "1e7" = 10.0}
                                    # (author mode: the curator's default budget when omitted)
    max_left_out = 0.05             # optional, curator mode: the run fails (exit 4, details in
                                    # confidential/failure.json) when the budget leaves out
                                    # more than this share of a table's rows or of a measure

    [ledger]                        # optional, curator mode: a release series' lifetime ledger
    path = "ledger/cbp"             # the ledger folder, relative to the spec (created 0700 by
                                    # `tabdp ledger init`: a run never creates one; never
                                    # inside an output folder)
    series = "cbp-annual"           # the series' name: a ledger of another series is refused
    lifetime_budget = 8.0           # each unit's ρ over every release of the series: a number,
                                    # or a curve {"1e3" = 2.0, "1e7" = 20.0}; needs input.unit
                                    # (a dataset given a `ledger` by the curator configuration
                                    # is charged to it instead: no [ledger] then)
    max_left_out = 0.05             # optional: as budget.max_left_out, for what the budget and
                                    # the lifetime budget leave out (a spec without [budget];
                                    # with one, set it in one section only)

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
    cv_flag = 0.3                   # flag "C" where cv >= this; false disables (default 0.3);
                                    # a fraction in (0, 1]: 0.3 is 30 % (30 is refused)
    suppress_cv = 1.0               # optional, in (0, 5): withhold (null) estimates where
                                    # cv >= this ("S" alone: no C or N); the published
                                    # intervals stay
                                    # unconditional, so published small cells cover less
    negative = "flag"               # "flag": flag "N", keep the signed estimate (default);
                                    # "clamp": flag "N" and publish 0 (post-processing, biased
                                    # upward: about 0.4 sd for an empty cell, Gaussian noise)
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
    count_rows = 1                  # with input.unit: an enforced cap, not only an assumption:
                                    # the run counts at most this many rows of a unit in a
                                    # count cell, so it defines the published count (default
                                    # 1: distinct units per cell; k: rows, at most k per unit
                                    # per cell; no effect without a unit). The planned curves
                                    # use it; the per-record report uses the actual (capped)
                                    # contributions. Python's df.dp.count counts every row
                                    # unless max_rows= is given

    [[tables]]                      # at least one
    name = "county_naics2"          # required: letters, digits, '_'; unique; no "__"
    kind = "sum"                    # "sum" (default) | "count"
    measures = ["payroll", "employment"]    # sum: required, non-empty, unique; count: refused
    by = ["county", "naics2"]       # key columns (may be empty: one national cell); each needs a
                                    # domain ([domains] or a hierarchy level) unless `keys` is set
    keys = { file = "allowed.parquet" }     # optional: allowed key combinations (CSV/Parquet with
                                    # exactly the `by` columns, no duplicate rows) instead of the
                                    # cross product of the domains
    mechanism = { family = "exp_polylog", sigma = 1.1e6, a = 1.0, d = 5.1, p = 1.0 }
                                    # family (see MECHANISM_FAMILIES) and its constructor
                                    # arguments; exactly one of `mechanism` / `calibrate`
                                    # (a count may omit both: discrete Gaussian with sigma = 2)
    calibrate = { family = "exp_polylog", targets = { "2.5e5" = 0.5, "2e10" = 50.0 },
                  typical_total = 1e7, fixed = { p = 1 }, objective = "auto" }
    grid = 1.0                      # optional exact-rounding grid of the noisy output: a
                                    # number > 0 or {measure = step}; default: each mechanism's
                                    # default. Additive mechanisms: the estimate's grid (e.g.
                                    # 1.0 dollar); transformation mechanisms: the grid of the
                                    # noisy transformed value (at most sigma/10; use
                                    # publication.round to round their published estimates)
    nulls = "drop"                  # optional override of input.nulls
    publication = { cv_flag = 0.5 } # optional override of [publication], key by key
    consistent = false              # true: publish the table and its rollups from the GLS
                                    # consistent estimate of the table and its direct = true
                                    # rollups (every parent the exact sum of its children, in
                                    # the files they have as rollups; no _direct files). Needs
                                    # a direct rollup and an additive mechanism; refuses
                                    # publication.round and negative = "clamp"
    shares = { county_naics2 = 0.9, state_naics2 = 0.1 }
                                    # consistent tables: the share of every per-record target
                                    # spent on each measured level (the table's own label and
                                    # each direct rollup's; > 0, summing to 1); each level gets
                                    # its own mechanism (sigma / sqrt(share) for a Gaussian, a
                                    # calibration to share x targets for a calibrate table), so
                                    # a unit's total loss is the table's. Default: every level
                                    # uses the table's mechanism (each charged in full)
    nonnegative = false             # consistent tables: true sets negative consistent finest
                                    # cells to 0 (every level stays the sum of its finest
                                    # cells); biased upwards: flagged B, stated in the summary
    integer = false                 # consistent tables: true rounds the consistent finest
                                    # cells to whole numbers (grid must be 1 or absent);
                                    # biased: flagged B, stated in the summary

    [[tables.rollups]]              # optional, any number
    by = ["state", "naics2"]        # coarser grouping: each column is either in the table's
                                    # `by` or a coarser level of a hierarchy whose finer level
                                    # is in the table's `by`; [] is the national total
    direct = false                  # also release this level directly (more budget, more
                                    # accuracy; accounted in the ledger)

"""

from __future__ import annotations

from tabdp.release.spec.checks import (
    global_round_problem,
)
from tabdp.release.spec.files import (
    align_keys,
    read_keys,
)
from tabdp.release.spec.load import (
    load_spec,
    parse_spec,
)
from tabdp.release.spec.model import (
    BudgetSpec,
    Hierarchy,
    InputSpec,
    LedgerSpec,
    OutputSpec,
    PlanSpec,
    Publication,
    ReleaseInfo,
    ReleaseSpec,
    RollupSpec,
    TableSpec,
    public_spec_hash,
    redact_spec,
)
from tabdp.release.spec.schema import (
    CALIBRATION_FAMILIES,
    MECHANISM_FAMILIES,
    RESERVED_COLUMNS,
    ROUND_MOE_SHARE,
    SPEC_KEYS,
)
from tabdp.release.spec.tables import (
    spec_keys_hint,
)

__all__ = [
    "MECHANISM_FAMILIES",
    "CALIBRATION_FAMILIES",
    "SPEC_KEYS",
    "ReleaseSpec",
    "ReleaseInfo",
    "InputSpec",
    "Hierarchy",
    "BudgetSpec",
    "LedgerSpec",
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
