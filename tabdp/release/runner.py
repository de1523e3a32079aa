"""Plan and run a release spec: the engine behind ``tabdp plan`` and ``tabdp run``.

A run reads the confidential input once per release (Polars scans it lazily), releases every
table with its mechanism, derives the rollups as post-processing, applies the publication rules
and writes two folders *atomically*: everything is built in temporary folders next to the
targets and renamed into place at the end, so a failure leaves nothing public behind and an
existing output is only replaced with ``overwrite=True``. The input is never modified.

Records, not positions: without ``input.unit`` every row gets a row id (`ROW_ID`) as the
input is read, before any join, filter or sort, and the session follows that id.

Failures: everything checkable without data is checked first (ordinary exceptions). Once the
data has been read, any failure becomes one
[`DataDependentFailure`][tabdp.release.DataDependentFailure] with a fixed message; its details go
only to ``failure.json`` in the confidential folder. With a lifetime ledger, the commit comes
after every check of the move into place, just before the renames; a failure after it (the
ledger charged, nothing published) is stated in ``failure.json`` (``ledger``).

* Public folder: one Parquet per table and rollup (``output.form = "long"``, the default:
  ``keys, measure, estimate, sd, moe, lower, upper, cv, flag``; ``"wide"``: keys, then ``m,
  m_sd, m_moe, m_lower, m_upper, m_cv, m_flag`` per measure; the accessor's output model,
  `tabdp.frame._output`), ``manifest.json``, ``summary.json``, a self-contained
  ``summary.html`` and, for a seeded test run, ``NOT_FOR_PUBLICATION.txt``. Apart from the
  noisy estimates (and what is computed from them: plug-in sd, moe, cv, flags), nothing in it
  depends on the confidential data or on the seed; every file has the manifest's timestamp
  as its modification time.
* Confidential folder (0700, files 0600): ``per_record_losses.parquet`` (each unit's total ρ,
  ε, size, (ε, δ) and per-release ρ; the id column is the unit column, or ``row``),
  ``worst_cells.parquet`` (the largest loss of one unit in each released cell),
  ``confidential.json`` (counts of rows read, outside the key sets, handled by the input rules,
  the seed of a seeded run, the data's schema) and ``confidential_report.html``; after a failed
  run, only ``failure.json``.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from tabdp._warnroute import thread_warnings
from tabdp.exceptions import (
    CoverageWarning,
    DataValidationError,
    InvalidParameterError,
    SpecError,
)
from tabdp.release._input import (
    NATIONAL,
    ROW_ID,
    ROW_LABEL,
    _author_key_casts,
    _refuse_mapping_collisions,
    check_input_present,
    declared_schema,
    read_input,
    scan_input,
)
from tabdp.release._left_out import (
    LEFT_OUT_BIAS_TEXT,
    LIFETIME_LEFT_OUT_BIAS_TEXT,
    left_out_bias_in_words,
    left_out_sizes,
    left_out_sizes_in_words,
)
from tabdp.release._outputs import (
    LeftOutError,
    ReleaseResult,
    check_left_out,
    left_out_by_table,
    left_out_filters,
    left_out_in_words,
    publishable_in_words,
    summary_grid,
)
from tabdp.release._plan import (
    curve_in_words,
    mark_not_for_publication,
    plan_summary,
    public_lifetime,
    release_guarantee_in_words,
    write_plan,
)
from tabdp.release._staging import (
    FAILURE_FILE,
    NOT_FOR_PUBLICATION,
    RUN_FILES,
    SPARK_LOG,
    DataDependentFailure,
    _check_target,
    _failure_details,
    _keep_spark_log,
    _start_time,
    _write_failure,
    clean_stale_staging,
)
from tabdp.release._tables import Progress, _no_progress, _run_with_data
from tabdp.release.spec import ReleaseSpec

if TYPE_CHECKING:
    from tabdp.frame.backends import RunEngine

#: The public names of the run, whichever stage module holds them (the stages: `_plan`,
#: `_input`, `_tables`, `_outputs`, `_staging`).
__all__ = ["ReleaseResult", "plan_summary", "curve_in_words", "publishable_in_words",
           "write_plan", "run_release", "NATIONAL", "ROW_ID", "DataDependentFailure",
           "declared_schema", "clean_stale_staging", "FAILURE_FILE", "NOT_FOR_PUBLICATION",
           "ROW_LABEL", "Progress", "release_guarantee_in_words", "left_out_sizes",
           "left_out_sizes_in_words", "LEFT_OUT_BIAS_TEXT", "check_input_present", "read_input",
           "SPARK_LOG", "left_out_by_table", "left_out_in_words", "LeftOutError",
           "check_left_out", "summary_grid", "LIFETIME_LEFT_OUT_BIAS_TEXT",
           "left_out_bias_in_words", "left_out_filters", "RUN_FILES"]


def run_release(spec: ReleaseSpec, *, overwrite: bool = False,
                progress: Progress | None = None, test_seed: bool = False,
                engine: str = "polars", spark: Any = None,
                spark_master: str | None = None,
                _ledger_read_only: bool = False,
                _not_for_publication: tuple[str, str] | None = None,
                _notices: list[tuple[type[Warning], str]] | None = None) -> ReleaseResult:
    """Run a release: read the input, release every table, derive rollups, write both folders.

    Everything that can be checked without data is checked first (seed, output folders, stale
    staging folders of a killed run, input presence); those errors are ordinary exceptions.
    Once the data has been read, every failure, whatever its cause, becomes one
    [`DataDependentFailure`][tabdp.release.DataDependentFailure] with a fixed message: the details
    go only to ``failure.json`` in the confidential folder, and nothing public is written.

    Args:
        spec: A validated spec.
        overwrite: Replace existing output folders.
        progress: Optional callback ``(step, steps, description)``.
        test_seed: Allow a spec with ``[randomness] seed`` (tests only): the public folder is
            then marked not for publication (``NOT_FOR_PUBLICATION.txt`` and
            ``"not_for_publication": true`` in the manifest and summary).
        engine: ``"polars"`` (one machine) or ``"spark"`` (the input is read and released in
            Spark; the same outputs, see docs/spark.md).
        spark: Spark engine: an existing SparkSession to run in (default: one on
            ``spark_master``, created, or the active one, and stopped at the end if created).
        spark_master: Spark engine: the master URL of the session to create (default
            ``local[2]``).

    Returns:
        The output locations and the public tables.

    Raises:
        SpecError: The spec is seeded and ``test_seed`` is false, or the input is missing
            (``input.table``: under the Polars engine, or not in the Spark catalog), or
            (curator mode, ``input.path``) a column of the spec is missing from the input's
            schema or has a type the release cannot use (read from the Parquet metadata,
            before any data).
        InvalidParameterError: An output folder exists and ``overwrite`` is false, or is a
            symbolic link, or a staging folder of another (or a killed) run cannot safely be
            removed.
        InvalidParameterError: Also: an unknown engine, or Spark options without the Spark
            engine (or both ``spark`` and ``spark_master``), or the internal
            ``_ledger_read_only`` without ``_not_for_publication``.
        UnsupportedBackendError: The Spark engine without PySpark, or Spark could not start.
        DataDependentFailure: Anything went wrong after the data was read.

    Warns:
        CoverageWarning: Curator mode only: the input is empty, or rows fall outside a
            table's key set (the tables are named; counts only in ``confidential.json``).
        RolledForwardWarning: Curator mode only: the clean-up put the outputs of a run killed
            after its commit in place (rolled forward), before this run's own checks; they
            are named with the time, and recorded in ``rolled_forward.jsonl`` in the
            confidential folder (author mode: only there).

    ``_ledger_read_only`` (internal: ``tabdp compare``'s DP side only, which marks its outputs
    NOT FOR PUBLICATION): with ``[ledger]``, read the lifetime ledger without charging it. It
    is locked and verified as for a run (refused the same way, before any data) and units at
    their lifetime budget are left out exactly as the run leaves them out, but nothing is
    committed: no chain entry, history, state or anchor change, and no confidential
    ``ledger.json``. Not public: a published release made that way would be counted nowhere
    (review stop 63: a read-only ledger is refused by `tabdp.Session` otherwise).

    ``_not_for_publication`` (internal: ``tabdp compare``'s DP side, ``(reason, text)``, e.g.
    ``("comparison_copy", ...)``): the outputs are marked not for publication from the start,
    as a seeded run's are (`mark_not_for_publication`): ``"not_for_publication": true`` and
    the reason in the manifest and summary, a red notice on ``summary.html`` and
    ``NOT_FOR_PUBLICATION.txt``, written in the same staging as the tables, so no state of the
    folder looks publishable. A run with ``_ledger_read_only`` must be marked (it is charged
    nowhere): without ``_not_for_publication`` it is refused before anything is read.

    ``_notices`` (internal: ``tabdp run``): an author-mode run's notices to its author (a
    dataset ledger's anchor notices, naming the dataset only: `open_ledger`) are appended
    there as ``(category, text)`` instead of warned, also when the ledger is then refused.
    The caller shows exactly those to the author; every other warning of the process stays
    a warning (in the CLI's author mode, on the confidential ``stderr.log``).

    Example:
        >>> import tabdp, pathlib, tempfile
        >>> from tabdp.release.spec import load_spec
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> spec = load_spec(root / "examples" / "cbp_release.toml")
        >>> out = pathlib.Path(tempfile.mkdtemp())
        >>> import dataclasses
        >>> spec = dataclasses.replace(spec, output=dataclasses.replace(
        ...     spec.output, public=out / "public", confidential=out / "confidential"))
        >>> res = run_release(spec)
        >>> (res.public / "manifest.json").exists()
        True
        >>> (res.confidential / "per_record_losses.parquet").exists()
        True
    """
    from tabdp.frame.backends import run_engine

    report = progress or _no_progress
    # the one engine decision (tabdp.frame.backends): the same calls below for every engine
    eng = run_engine(engine, spark, spark_master)
    eng.check_source(spec.input.table)
    if spec.seed is not None and not test_seed:
        raise SpecError(
            "randomness.seed",
            "the spec sets a seed, which makes the noise reproducible: anyone who learns it "
            "can remove the noise. Seeded runs are for tests only and tabdp run refuses them "
            "without an explicit flag. Nothing was read or written.\nHint: remove [randomness] "
            "for a release (secure randomness), or pass --test-seed (run_release(..., "
            "test_seed=True)) for a test: its public folder is marked NOT FOR PUBLICATION.")
    if _ledger_read_only and _not_for_publication is None:
        raise InvalidParameterError(
            "run_release(_ledger_read_only=True) without _not_for_publication: a release that "
            "reads the lifetime ledger without charging it must never look publishable. "
            "Nothing was read or written.\nHint: this internal option is tabdp compare's; "
            "pass _not_for_publication=(reason, text), or run the release normally.")
    targets = [spec.output.public, spec.output.confidential]
    # author mode: a refusal names nothing in the curator's confidential folder (review r52)
    author = spec.input.mode == "author"
    clean_stale_staging(targets, private=[False, True], author=author)
    _check_target(spec.output.public, overwrite, "public", spec.output.confidential, author)
    _check_target(spec.output.confidential, overwrite, "confidential", author=author)
    started, epoch = _start_time()
    summary = plan_summary(spec)  # validates mechanisms / grids before any data is read
    if _not_for_publication is not None:
        # every output follows from the summary (manifest, summary, page, marker file)
        mark_not_for_publication(summary, *_not_for_publication)
    check_input_present(spec)
    from tabdp.release._ledger import open_ledger

    # the lifetime ledger: locked and verified before anything of the data is read (the
    # schema check and the declared scan read the files' footers), so that whether a run is
    # refused for its ledger never depends on the data
    ledger = open_ledger(spec, read_only=_ledger_read_only, notices=_notices)
    if ledger is not None and spec.ledger is not None and spec.ledger.dataset is None:
        # the spec's own series ([ledger]): the bound over its releases, from the past
        # entries' names and public curves (read from the chain, verified at open; never the
        # per-unit state) and this one's. A dataset's ledger (the curator configuration's,
        # shared by authors) keeps the plan's words: its earlier releases are other authors'
        # and how many there were is not stated (review R13)
        summary["lifetime"] = public_lifetime(
            spec, summary["total_policy_curve"], "unit" if spec.input.unit else "record",
            history=ledger.releases_public())
    try:
        return _run_with_ledger(spec, eng, ledger, overwrite=overwrite, report=report,
                                started=started, epoch=epoch, summary=summary)
    finally:
        if ledger is not None:
            ledger.close()


def _run_with_ledger(spec: ReleaseSpec, eng: RunEngine, ledger: Any, *, overwrite: bool,
                     report: Any, started: str, epoch: float,
                     summary: dict[str, Any]) -> ReleaseResult:
    """`run_release` once its ledger (or ``None``) is open: the schema, then the data."""
    _check_schema_first(spec, ledger)
    # Spark: started (its log kept privately), the table checked; in curator mode its column
    # names too, from the catalog (author mode: the curator's, refused in the data phase)
    from tabdp.release._spark_run import check_table_columns

    eng.open(spec.input.table,
             check_table_columns if spec.input.mode == "curator" else None)
    details: dict[str, Any] | None = None
    result: ReleaseResult | None = None
    releases = None if ledger is None else ledger.releases
    try:
        # data-free: mapping codes the join's conversion merges are refused before any read
        # where the engine reads the input's schema first (Polars)
        eng.before_data(lambda: _check_input_first(spec, started))
        # the data pass's warnings: this thread's own (tabdp's notices, and a library's it
        # called), collected by thread (`tabdp._warnroute`), never recorded process-wide: a
        # record took another thread's warnings into the curator's files, and another
        # thread's overlapping catch_warnings could put the handler back mid-run, sending
        # the run's own warnings past it (to an author's terminal). The filters below are
        # process-wide; the collection is not
        with warnings.catch_warnings(), thread_warnings() as caught:
            warnings.simplefilter("always")
            # PySpark's notice about the pandas version says nothing about the data
            warnings.filterwarnings("ignore", message="PySpark does not yet fully support",
                                    category=FutureWarning)
            eng.quiet_warnings()  # the engine's own notices (nothing about the data)
            try:
                result = _run_with_data(spec, summary, started, epoch, overwrite, report,
                                        caught, eng, ledger=ledger)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as err:  # noqa: BLE001 - one generic failure once data was
                # read, Polars' Rust panics (BaseExceptions) included (review R14: a panic in
                # the counting pass escaped the CLI with a traceback)
                details = _failure_details(err, "after reading the input")
                details["warnings"] = [*getattr(ledger, "open_warnings", []),
                                       *[str(w.message) for w in caught]]
                if ledger is not None and releases is not None:
                    from tabdp.release._ledger import charged_failure

                    charged_failure(details, ledger, releases, spec.sha256)
    finally:
        log = eng.close()
        if log is not None:  # the JVM's start-up and log lines: the curator's
            _keep_spark_log(log, spec.output.confidential)
    if details is not None:
        # raised outside the except block: the exception carries no chained details
        failure = DataDependentFailure(_write_failure(spec, details, started),
                                       spec.output.confidential)
        if "ledger" in details and spec.input.mode == "curator":
            # the curator's terminal (never an author's: the message stays the fixed one)
            failure.ledger_release = details["ledger"]["release"]
        # this frame is in the failure's traceback: one shown with its frames' variables
        # (IPython's verbose mode, rich, capture_locals) quoted the details and the warnings
        details = None
        caught.clear()
        raise failure
    assert result is not None
    # Curator mode: the data's owner is told (terminal / Python warning, never a public file)
    # when the input is empty or rows miss a key set. Author mode: nothing (an oracle).
    for text in result.coverage:
        warnings.warn(text, CoverageWarning, stacklevel=2)
    return result


def _check_input_first(spec: ReleaseSpec, started: str) -> None:
    """The input's schema, read before any data: mapping codes the conversions would merge.

    The schema and the spec decide it (author mode converts key columns first). In author
    mode the curator's files (their schema, or none matching) are not the author's to see: a
    failure to read them is the generic failure, details in the confidential folder.
    """
    failure: DataDependentFailure | None = None
    try:
        lf0, schema0 = scan_input(spec, schema_only=True)
    except DataValidationError as err:
        if spec.input.mode != "author":
            raise
        failure = DataDependentFailure(
            _write_failure(spec, _failure_details(err, "reading the input's schema"), started),
            spec.output.confidential)
    if failure is not None:
        # outside the handler, no details in this frame (the failure's traceback holds it)
        raise failure from None
    if spec.input.mode == "author":
        lf0 = _author_key_casts(spec, lf0)
    _refuse_mapping_collisions(spec, schema0, lf0)


def _check_schema_first(spec: ReleaseSpec, ledger: Any = None) -> None:
    """Curator mode: the spec's columns against the input's schema, before any data is read.

    A misspelt or mistyped column is then a `SpecError` (exit 2), not the generic
    data-dependent failure (see `input_schema`; author mode is checked
    against the curator's declared schema, where one is given). With a lifetime ledger, the
    unit column's type against the one the ledger keys units by (a `LedgerError`, exit 2).
    """
    from tabdp.release.input_schema import (
        check_input_schema,
        check_ledger_unit_type,
        spec_input_schema,
    )

    got = spec_input_schema(spec)
    if got is None:
        return
    check_input_schema(spec, got[0], source=got[1])
    if ledger is not None:
        check_ledger_unit_type(spec, got[0], ledger.unit_dtype, source=got[1])


