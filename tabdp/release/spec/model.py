"""The validated release spec: one frozen dataclass per spec section (`ReleaseSpec` holds them).

Also the public hash of a spec (`public_spec_hash`), which leaves out the seed.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from tabdp._defaults import NEGATIVES as DEFAULT_NEGATIVES
from tabdp._validation import check_cv_threshold

if TYPE_CHECKING:
    from tabdp.privacy.budget import Budget


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


def classifications(hierarchies: Mapping[str, Hierarchy]) -> dict[str, str]:
    """Hierarchy name -> its classification: the first of the hierarchies sharing levels with it.

    Alternative hierarchies (sharing a level, e.g. two groupings of the same 6-digit codes) are
    one classification; the others are one each.

    Example:
        >>> import polars as pl
        >>> from pathlib import Path
        >>> m = pl.DataFrame({"a": ["1"], "b": ["2"]})
        >>> hs = {"x": Hierarchy("x", Path("x.csv"), ("a", "b"), m),
        ...       "y": Hierarchy("y", Path("y.csv"), ("b",), m.select("b"))}
        >>> classifications(hs)
        {'x': 'x', 'y': 'x'}
    """
    root = {n: n for n in hierarchies}

    def find(n: str) -> str:
        while root[n] != n:
            n = root[n]
        return n

    names = list(hierarchies)
    for i, n in enumerate(names):
        for other in names[i + 1:]:
            if set(hierarchies[n].levels) & set(hierarchies[other].levels):
                a, b = find(n), find(other)
                if a != b:  # the earlier name of the two classes names the joined one
                    root[max(a, b, key=names.index)] = min(a, b, key=names.index)
    return {n: find(n) for n in names}


@dataclass(frozen=True)
class BudgetSpec:
    """``[budget]``: a constant ρ or a ``{size: rho}`` curve (float keys)."""

    rho: float | Mapping[float, float]
    #: Curator mode: the largest share of a table's rows or of any of its measures the budget
    #: may leave out; above it the run fails (a data-dependent failure). ``None``: no limit.
    max_left_out: float | None = None



@dataclass(frozen=True)
class LedgerSpec:
    """``[ledger]``: the lifetime ledger of a release series (`tabdp.Ledger`).

    Or the ledger the curator configuration gives the spec's dataset (``dataset`` set): its
    series and lifetime budget are then the ledger's own (``None``), and messages about it
    name the dataset, never the ledger's path (an author may read them).
    """

    path: Path
    series: str | None
    #: Each unit's lifetime ρ: a number or a ``{size: rho}`` curve (float keys), or, for a
    #: dataset's ledger, the ``Budget`` recorded in it; ``None``: the ledger's recorded one.
    lifetime_budget: float | dict[float, float] | Budget | None
    #: The dataset whose curator-configured ledger this is (``None``: the spec's ``[ledger]``).
    dataset: str | None = None
    #: ``[ledger] max_left_out``: as ``budget.max_left_out``, the largest share of a table's
    #: rows or of any of its measures the filters (the lifetime budget, and the budget if any)
    #: may leave out; above it the run fails. ``None``: no limit.
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

    def __post_init__(self) -> None:
        """Refuse a cv threshold outside (0, 5) (``30`` meant as 30 %: the fix says 0.3)."""
        for name in ("cv_flag", "suppress_cv"):
            value = getattr(self, name)
            if value is not None:
                check_cv_threshold(name, value, owner="Publication")


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
    ``keys`` is given. ``consistent`` publishes the table and its ``direct = true`` rollups as
    one consistent set ([`tabdp.hierarchy.consistent`][tabdp.hierarchy.consistent]); ``shares``
    splits the per-record targets across those measured levels; ``nonnegative`` and ``integer``
    (consistent tables only) clamp the consistent finest cells at 0 and round them to whole
    numbers: biased post-processing, flagged ``B`` in the published cells.
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
    consistent: bool = False
    #: Consistent tables: level label → share of every per-record target spent there (the
    #: table's own label and its direct rollups'), and the mechanism of each measured level
    #: for its share (empty: every level uses ``mechanism``).
    shares: Mapping[str, float] = field(default_factory=dict)
    level_mechanisms: Mapping[str, Any] = field(default_factory=dict)
    #: Consistent tables: biased post-processing options of the finest consistent cells.
    nonnegative: bool = False
    integer: bool = False


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
    #: ``[ledger]``, or ``None``.
    ledger: LedgerSpec | None = None

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
