"""Releasing a spec's tables on an engine (Polars or Spark) and writing the outputs.

The key sets and accessor arguments of every table are decided from the spec. Whatever the
engine, the same calls: the run engine (`tabdp.frame.backends.RunEngine`) reads the input with
its own steps (`_SpecInput`: the spec's steps written once per engine); the released tables
and the per-record report go through `tabdp.frame.releases` (the frame's engine decides);
nothing here tests which engine it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from tabdp._alloc import release_freed_memory
from tabdp.frame import long_to_wide
from tabdp.frame.keys import KeySet
from tabdp.mechanisms import Mechanism
from tabdp.planning import published_usability
from tabdp.privacy.session import Session
from tabdp.release._input import (
    NATIONAL,
    ROW_ID,
    ROW_LABEL,
    _add_derived,
    _author_key_casts,
    _derived_needs,
    _input_rules,
    _measures_used,
    _member_needs,
    _refuse_mapping_collisions,
    _rows_kept_one_to_one,
    _rules_outcome,
    member_column,
    scan_input,
)
from tabdp.release._left_out import _measure_mechanism
from tabdp.release._levels import _released_measures, _table_mechanism
from tabdp.release._outputs import (
    ReleaseResult,
    _confidential,
    _coverage,
    _manifest,
    _sorted_cells,
    _summary_table,
    _worst_cells,
    check_left_out,
    left_out_by_table,
    max_left_out,
    publishable_in_words,
    summary_grid,
)
from tabdp.release._plan import (
    _file_name,
    _planned_grid,
    _transformation,
    not_for_publication_text,
)
from tabdp.release._staging import NOT_FOR_PUBLICATION, _json, _set_tree, _Staging
from tabdp.release.curator_config import SCHEMA_DTYPES
from tabdp.release.publish import publish
from tabdp.release.rollup import _rollup
from tabdp.release.spec import ReleaseSpec, RollupSpec, TableSpec, read_keys

if TYPE_CHECKING:
    from tabdp.frame.backends import RunEngine
    from tabdp.privacy import Ledger

Progress = Callable[[int, int, str], None]


def _no_progress(i: int, n: int, what: str) -> None:
    return None


def _domain_keys(spec: ReleaseSpec, cols: Sequence[str]) -> KeySet:
    if not cols:
        return KeySet.from_dict({NATIONAL: ["all"]})
    return KeySet.from_dict({c: spec.domains[c] for c in cols})


def _table_keys(spec: ReleaseSpec, t: TableSpec) -> KeySet:
    if t.keys_file is not None:
        return KeySet.from_frame(read_keys(t.keys_file, t.by, spec.domains))
    return _domain_keys(spec, t.by)


def _rollup_keys(spec: ReleaseSpec, t: TableSpec, r: RollupSpec, table_keys: KeySet
                 ) -> pl.DataFrame | None:
    """Target keys of a rollup.

    The cross product of the domains, or (allowed-combination tables) the image of the table's
    keys.
    """
    if not r.by:
        return None
    if t.keys_file is None and all(c in spec.domains for c in r.by):
        return _domain_keys(spec, r.by).to_polars()
    img = table_keys.to_polars()
    for col, (h, fine) in r.maps.items():
        m = spec.hierarchies[h].mapping.select(fine, col).unique()
        m = m.with_columns(pl.col(fine).cast(img.schema[fine], strict=False))
        img = img.join(m, on=fine, how="left", maintain_order="left")
    return img.select(list(r.by)).unique(maintain_order=True).sort(list(r.by))


def _request(t: TableSpec, mech: Mechanism, by: Sequence[str], keys: KeySet, name: str,
             level: float, spec: ReleaseSpec) -> dict[str, Any]:
    """The accessor arguments of one table; with a unit, the plan's public bounds enforced.

    The bounds: ``input.max_cells`` cells per unit; ``plan.count_rows`` rows per unit in a
    count cell.
    """
    multi = spec.input.unit is not None
    req: dict[str, Any] = dict(
        kind=t.kind, by=list(by) if by else [NATIONAL], keys=keys, mechanism=mech, level=level,
        name=name, grid=_planned_grid(t, mech), max_cells=spec.input.max_cells if multi else None)
    if t.kind == "sum":
        # input.negatives was applied by the input rules (_input_rules): what is left is
        # allowed (a mechanism needing non-negative contributions still refuses negative ones)
        req |= dict(measures=list(t.measures), nulls=t.nulls, negatives="allow")
    else:
        req["max_rows"] = spec.plan.count_rows if multi else None
    return req


def _released_tables(lf: Any, session: Session, requests: list[dict[str, Any]]
                     ) -> list[pl.DataFrame]:
    """Every table of the release, planned before any is executed.

    One call for every engine (`tabdp.frame.releases.release_requests`): on Polars all tables
    are planned (every argument and schema check) before the input is read, then executed in
    order (streaming, all in one pass over the input: `tabdp.frame.backends.polars`); on Spark
    one after the other. Public
    tables take the key set's dtypes (the spec's domains), never the input's: the accessor
    returns keys in the data's dtypes (an Enum whose categories may come from the data), which
    a public file must not reflect.
    """
    from tabdp.frame.releases import release_requests, released_table

    # the tables (at most the key set each) as Polars frames, whichever engine released them
    outs = [released_table(out) for out in release_requests(lf, session, requests)]
    tables = []
    for req, out in zip(requests, outs, strict=True):
        key_schema = req["keys"].to_polars().schema
        tables.append(out.with_columns(
            pl.col(c).cast(key_schema[c]) for c in req["by"]
            if c in out.columns and c in key_schema and out.schema[c] != key_schema[c]))
    return tables


def _strip_national(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` without the run's constant key columns (national tables, direct rollups)."""
    own = [c for c in df.columns if c == NATIONAL or c.startswith(f"{NATIONAL}_in")]
    return df.drop(own) if own else df


@dataclass(frozen=True)
class _Input:
    """The input as an engine read it, ready for the releases.

    Attributes:
        frame: A Polars LazyFrame or a Spark DataFrame.
        schema: The input's schema as read (dtype names).
        negatives: The input rules' counters (CONFIDENTIAL).
        rows: Row mode on Spark: the rows read (the per-row ledger's size); else ``None``.
    """

    frame: Any
    schema: Mapping[str, str]
    negatives: dict[str, Any]
    rows: int | None = None


class _SpecInput:
    """The spec's input steps, written once for each engine (`InputSteps`).

    The run engine picks its own (``eng.read_input(_SpecInput(spec))``): the release workflow
    makes one call for every engine.
    """

    def __init__(self, spec: ReleaseSpec) -> None:
        """The steps of ``spec``'s input."""
        self.spec = spec

    @contextlib.contextmanager
    def polars(self) -> Iterator[_Input]:
        """The Polars engine: a lazy scan and the input's steps as a lazy plan."""
        spec = self.spec
        lf, input_schema = scan_input(spec, flag_lost=True)  # declared nulls: confidential
        if spec.input.unit is None:
            # Records, not positions: each row gets its id before any join, filter or sort,
            # and the session follows that id.
            lf = lf.with_row_index(ROW_ID)
        lf, negatives = _input_rules(spec, lf)
        if spec.input.mode == "author":
            lf = _author_key_casts(spec, lf)
        _refuse_mapping_collisions(spec, input_schema, lf)  # (checked before the run too)
        lf = _add_derived(spec, lf, input_schema)
        yield _Input(lf, input_schema, negatives)

    @contextlib.contextmanager
    def spark(self, spark: Any) -> Iterator[_Input]:
        """The Spark engine: the same steps on a Spark DataFrame (docs/spark.md)."""
        from tabdp.release import _spark_run as sr

        spec = self.spec
        inp = spec.input
        declared = {c: SCHEMA_DTYPES[t] for c, t in inp.schema.items()} \
            if inp.mode == "author" and inp.schema else {}
        if declared and inp.path is not None:
            # author mode: file by file against the declared schema, as the Polars engine (the
            # same files, folder values and per-file decisions: tabdp.release.declared)
            sdf, input_schema, twin_notes = sr.read_declared(spark, inp.path, declared,
                                                             inp.hive_partitioning)
        else:
            twin_notes = []
            sdf, input_schema = sr.read_input(spark, inp.table, inp.path, inp.hive_partitioning,
                                              {c: d.dtype for c, d in spec.domains.items()})
            if declared:  # a catalog table: the declared types, never the table's
                sdf = sr.declared_casts(sdf, declared)
                input_schema = {k: str(v) for k, v in sr.schema_of(sdf).items()}
        # columns equal in any letter case: refused from the schema (Spark cannot read them)
        sr.refuse_case_clashes(spark, sdf)
        persisted = []
        try:
            if inp.unit is None:
                # Records, not positions: rows are numbered as Spark reads them, before any
                # rule, join or filter, and the session follows that id.
                sdf, base = sr.number_rows(sdf, ROW_ID)
                persisted.append(base)
            sdf, row, measures = sr.input_rules(
                sdf, unit=inp.unit, unit_nulls=inp.unit_nulls, nonfinite=inp.nonfinite,
                negatives=inp.negatives, bounds=dict(inp.bounds),
                measures=_measures_used(spec))
            negatives, _ = _rules_outcome(spec, row, measures,
                                          [m for m in inp.bounds if m in measures])
            if any(k.startswith("lost:") for k in row):
                negatives["declared_nulls"] = {k[len("lost:"):]: n for k, n in row.items()
                                               if k.startswith("lost:")}
            if twin_notes:  # which file, which column, why (confidential.json only)
                negatives["declared_null_files"] = twin_notes
            if inp.mode == "author":
                sdf = sr.author_key_casts(sdf, [c for t in spec.tables for c in t.by],
                                          dict(spec.domains))
            # (Polars' conversion rules: Spark's own casts may merge other codes too, e.g.
            # text with spaces; see docs/spark.md)
            _refuse_mapping_collisions(spec, input_schema, dtypes=sr.schema_of(sdf))
            need, national = _derived_needs(spec, input_schema)
            sdf = sr.add_derived(
                spark, sdf, {col: spec.hierarchies[h].mapping.select(fine, col)
                             .unique(maintain_order=True) for col, (h, fine) in need.items()},
                NATIONAL if national else None, _member_needs(spec))
            yield _Input(sdf, input_schema, negatives,
                         row.get("rows") if inp.unit is None else None)
        finally:
            for p in persisted:
                sr.free_rows(p)


def _run_with_data(spec: ReleaseSpec, summary: dict[str, Any], started: str, epoch: float,
                   overwrite: bool, report: Progress, caught: list[Any], eng: RunEngine, *,
                   ledger: Ledger | None = None) -> ReleaseResult:
    """Read the input with the engine's steps, release every table and write both folders."""
    with eng.read_input(_SpecInput(spec)) as inp:
        return _release_and_write(spec, summary, started, epoch, overwrite, report, caught,
                                  inp, eng, ledger=ledger)


def _release_and_write(spec: ReleaseSpec, summary: dict[str, Any], started: str, epoch: float,
                       overwrite: bool, report: Progress, caught: list[Any], inp: _Input,
                       eng: RunEngine, *, ledger: Ledger | None = None) -> ReleaseResult:
    """Release every table of the input (a Polars LazyFrame or a Spark DataFrame) and write."""
    from tabdp._version import __version__
    from tabdp.report.html import loss_statistics, render_confidential_html, render_summary_html

    # Row mode streams (no per-row state: the ledger is recomputed from the input) when the
    # hierarchy joins keep one row per record; decided from the spec and public mappings only.
    lf, input_schema, negatives = inp.frame, inp.schema, inp.negatives
    one_to_one = spec.input.unit is None and _rows_kept_one_to_one(spec, input_schema, lf)
    # (an engine with its own ledger replays the releases' definitions there instead)
    streaming = eng.streams_rows and one_to_one
    session = Session(unit=spec.input.unit or ROW_ID, _row_ids=spec.input.unit is None,
                      _rows_one_cell=one_to_one,
                      seed=spec.seed, streaming=streaming,
                      budget=None if spec.budget is None else spec.budget.rho,
                      track_cells=True, ledger=ledger,
                      # tabdp compare's DP side only (run_release's internal
                      # _ledger_read_only): a read-only ledger, charged nowhere, whose outputs
                      # compare marks NOT FOR PUBLICATION
                      _read_only_ledger=ledger is not None and ledger.read_only,
                      # the engine's phases inside a step (the same for every dataset)
                      progress=lambda name, what: report(step, steps, f"{name}: {what}"))
    from tabdp.frame.releases import bind_session_engine, report_frames, write_report

    # On Spark the ledger lives in Spark: with row ids kept one to one by the hierarchy joins,
    # the releases' definitions, replayed in Spark (no per-row state; the report lists the rows
    # the releases read, as a streaming Polars run); otherwise a Spark table (per unit, or per
    # row id, listing every row read). Polars sessions keep their own ledger.
    bind_session_engine(session, lf, replay=one_to_one, row_mode=spec.input.unit is None,
                        rows=inp.rows)
    expect = getattr(session.ledger, "expect_report", None)  # a streaming session's ledger
    if streaming and expect is not None:
        # the per-record report written below, at the release's δ: the releases' pass keeps
        # its columns (ε at δ included) as it reads the input
        expect(spec.release.delta)
    level = spec.release.level
    # Plan: every table's public definition (key sets, mechanisms, rollup targets) first.
    plans: list[tuple[TableSpec, Mechanism, dict[str, Any]]] = []
    requests: list[dict[str, Any]] = []
    for i, t in enumerate(spec.tables):
        mech = _table_mechanism(t)
        keys = _table_keys(spec, t)
        targets = {r.label: _rollup_keys(spec, t, r, keys) for r in t.rollups}
        plans.append((t, mech, targets))
        # a consistent table with shares releases each measured level with its own mechanism
        own = _table_mechanism(t, "_".join(t.by) if t.by else "national") if t.shares else mech
        requests.append(_request(t, own, t.by, keys, t.name, level, spec))
        for r in t.rollups:
            if r.direct:
                # the table's population at its level: rows outside the table's key set are
                # outside every direct release of it (the membership column, _member_needs)
                member = member_column(i)
                target_keys = targets[r.label]
                dkeys = (KeySet.from_dict({member: ["all"]}) if not r.by else
                         _domain_keys(spec, r.by) * KeySet.from_dict({member: ["all"]})
                         if target_keys is None else KeySet.from_frame(
                             target_keys.with_columns(pl.lit("all", pl.String).alias(member))))
                rmech = _table_mechanism(t, r.label) if t.shares else mech
                requests.append(_request(t, rmech, [*r.by, member], dkeys,
                                         f"{t.name}__{r.label}", level, spec))
    steps = 1 + sum(len(t.rollups) for t in spec.tables) + 1
    step = 1
    cells = sum(len(req["keys"]) for req in requests)
    report(step, steps, f"releasing {len(requests)} tables ({cells:,} cells)")
    released = iter(_released_tables(lf, session, requests))
    public: dict[str, pl.DataFrame] = {}
    table_keys: dict[str, list[str]] = {}
    for t, mech, targets in plans:
        measures = _released_measures(t)
        wide = _strip_national(next(released))
        # Rollup sums of grid multiples are rounded back to the grid (additive mechanisms only:
        # a transformation mechanism's grid is in transformed space).
        grid = {} if _transformation(mech) else summary_grid(summary, t.name)
        table_keys[_file_name(t)] = list(t.by)
        public[_file_name(t)] = publish(wide, keys=list(t.by), measures=measures,
                                        rules=t.publication, grid=grid)
        mechs = {m: _measure_mechanism(mech, m) for m in measures}
        if t.consistent:
            # The table and its direct rollups, post-processed together (GLS): every level is
            # published in the file it has as a rollup; no _direct files.
            from tabdp.release._consistent import biased_options, consistent_levels, flag_biased

            step += len(t.rollups)
            report(step, steps, f"consistent estimate of {t.name}")
            direct_frames = {tuple(r.by): _strip_national(next(released))
                             for r in t.rollups if r.direct}
            lmechs: Any = mech
            if t.shares:
                lmechs = {tuple(t.by): _table_mechanism(t, "_".join(t.by) if t.by else
                                                        "national"),
                          **{tuple(r.by): _table_mechanism(t, r.label) for r in t.rollups
                             if r.direct}}
            levels = consistent_levels(spec, t, lmechs, measures, wide, direct_frames, targets,
                                       level, grid)
            public[_file_name(t)] = publish(levels[tuple(t.by)], keys=list(t.by),
                                            measures=measures, rules=t.publication, grid=grid)
            for r in t.rollups:
                table_keys[_file_name(t, r)] = list(r.by)
                public[_file_name(t, r)] = publish(levels[tuple(r.by)], keys=list(r.by),
                                                   measures=measures, rules=t.publication,
                                                   grid=grid)
            if biased_options(t):  # nonnegative / integer: biased post-processing, flagged
                for f in [_file_name(t), *[_file_name(t, r) for r in t.rollups]]:
                    public[f] = flag_biased(public[f])
            continue
        for r in t.rollups:
            step += 1
            report(step, steps, f"rolling {t.name} up to {r.label}")
            target_keys = targets[r.label]
            maps = {col: spec.hierarchies[h].mapping.select(fine, col).unique()
                    for col, (h, fine) in r.maps.items()}
            # warn=False: no RuntimeWarning (the method's text says it); the coarsened
            # measures are returned, never read from recorded warnings (process-wide: another
            # thread's warning would change this public text)
            rolled, _methods, coarsened = _rollup(
                wide, by=list(t.by), measures=measures, target_by=list(r.by), maps=maps,
                mechanisms=mechs, level=level, target_keys=target_keys, warn=False)
            if coarsened:
                # The numerical law had to coarsen its grid for this level's cell counts
                # (public: they follow from the key sets): say so next to the method.
                entry = next(e for e in _summary_table(summary, t.name)["rollups"]
                             if e["label"] == r.label)
                entry["moe_method"] = {
                    m: (v + " — at this level the FFT grid had to be coarsened, so the stated "
                        "accuracy is not guaranteed" if m in coarsened else v)
                    for m, v in entry["moe_method"].items()}
            rolled = rolled.drop("cells") if "cells" in rolled.columns else rolled
            table_keys[_file_name(t, r)] = list(r.by)
            public[_file_name(t, r)] = publish(rolled, keys=list(r.by), measures=measures,
                                               rules=t.publication, grid=grid)
            if r.direct:
                direct = _strip_national(next(released))
                table_keys[_file_name(t, r, direct=True)] = list(r.by)
                public[_file_name(t, r, direct=True)] = publish(
                    direct, keys=list(r.by), measures=measures, rules=t.publication, grid=grid)

    step += 1
    report(step, steps, "writing outputs")
    # the releases' pass is over: the free memory the command's heaps kept for its batches
    # goes back before the report's reads (which allocate from Polars' allocator)
    release_freed_memory()
    rep = session.report(delta=spec.release.delta)
    per_record: Any = None
    per_record_view: Any = None
    losses: Any = None  # the confidential page's statistics of a streamed report
    top_n = 20
    if not streaming:
        # Reproducible confidential files: units in id order, so two identically seeded runs
        # write the same bytes (Polars sorts in memory; Spark as it writes the file, the driver
        # getting a bounded view; a streaming report comes in row-id order: the input's)
        per_record = rep.per_record
        rename = ({ROW_ID: ROW_LABEL} if spec.input.unit is None
                  and ROW_ID in per_record.columns else {})
        per_record, per_record_view = report_frames(per_record, rename)
    # a seeded run, or tabdp compare's DP side (run_release's _not_for_publication): marked in
    # the manifest, the summary, its page and NOT_FOR_PUBLICATION.txt, all in this staging
    marked = bool(summary["not_for_publication"])
    files = [*public, "manifest.json", "summary.json", "summary.html",
             *([NOT_FOR_PUBLICATION] if marked else [])]
    summary["kind"] = "release"
    summary["files"] = files
    # [ledger]: summary["lifetime"] is the plan's plus the bound over the series' releases
    # (run_release: the spec, the past entries' names and public curves; never per-unit state)
    # post-processing of the published flags only (public)
    usable = {name.removesuffix(".parquet"): published_usability(df)
              for name, df in public.items()}
    summary["published_usability"] = usable
    summary["publishable_in_words"] = publishable_in_words(usable)
    if spec.output.form == "wide":  # the same columns, one row per cell
        public = {name: long_to_wide(df, table_keys[name]) for name, df in public.items()}
    manifest = _manifest(spec, summary, started, __version__)
    coverage, coverage_counts = _coverage(session)
    left_out = left_out_by_table(session)
    check_left_out(spec, left_out)  # before anything is written
    worst = _worst_cells(session)
    staging = _Staging([spec.output.public, spec.output.confidential], overwrite,
                       private=[False, True])
    with staging as (pub, conf):
        for name, df in public.items():
            report(step, steps, f"writing outputs: public/{name}")
            df.write_parquet(pub / name, statistics=False)
        (pub / "manifest.json").write_text(_json(manifest), encoding="utf-8")
        (pub / "summary.json").write_text(_json(summary), encoding="utf-8")
        (pub / "summary.html").write_text(render_summary_html(summary), encoding="utf-8")
        if marked:
            (pub / NOT_FOR_PUBLICATION).write_text(not_for_publication_text(summary),
                                                   encoding="utf-8")
        report(step, steps, "writing outputs: confidential/per_record_losses.parquet")
        if streaming:  # written by the engine, batch by batch, never held in memory
            rep.write_per_record(conf / "per_record_losses.parquet",
                                 rename={ROW_ID: ROW_LABEL})
            per_record_view = pl.scan_parquet(conf / "per_record_losses.parquet")
            # the file read once for the page's statistics and confidential.json's
            # (read row group by row group: each decoded once and freed before the next)
            losses = loss_statistics(conf / "per_record_losses.parquet", summary["budget"],
                                     top_n)
        else:  # by the engine's writer (Spark's: from the Spark ledger) into staging
            write_report(per_record, conf / "per_record_losses.parquet")
        # after the per-record file: a streaming session computes its loss statistics from it
        confidential = _confidential(spec, session, negatives, input_schema, caught,
                                     None if losses is None else losses.rho_summary())
        confidential["coverage"] = {"warnings": coverage, "counts": coverage_counts}
        worst.write_parquet(conf / "worst_cells.parquet")
        (conf / "confidential.json").write_text(_json(confidential), encoding="utf-8")
        (conf / "confidential_report.html").write_text(render_confidential_html({
            "release": summary["release"],
            "unit": spec.input.unit or ROW_LABEL,
            "seed": spec.seed,
            "budget": summary["budget"],
            "per_record": per_record_view,
            # the public curve as planned (count cells at plan.count_rows rows)
            "total_policy_curve": summary["total_policy_curve"],
            "worst_cells": {r.name: _sorted_cells(_strip_national(
                r.cells if r.cells is not None else pl.DataFrame())) for r in session.records},
            "counts": confidential["releases"],
            "left_out": left_out,
            **({"lifetime": summary["lifetime"]} if "lifetime" in summary else {}),
            "max_left_out": max_left_out(spec)[0],
            "max_left_out_key": max_left_out(spec)[1],
            "top_n": top_n,
            **({} if losses is None else {"losses": losses}),
        }), encoding="utf-8")
        # Hygiene: every public file carries the manifest's one timestamp (no processing
        # time leaks through mtimes); confidential files are the owner's only.
        _set_tree(pub, epoch, None, None)
        _set_tree(conf, None, 0o700, 0o600)
        # a read-only ledger (tabdp compare's DP side, never published) is never charged
        if ledger is not None and not getattr(ledger, "read_only", False):
            # every output is written: the ledger advances when the staging's checks have
            # passed (the output folders free, old ones moved aside), just before the renames
            # into place (a crash between leaves it charged for an unpublished release, never
            # the reverse; a failure after it is reported in failure.json by run_release)
            from tabdp.release._ledger import commit_release
            from tabdp.release._plan import lifetime_curve

            curve = lifetime_curve(spec, summary["total_policy_curve"])

            def commit() -> None:
                commit_release(session, spec, pub, conf, public_curve=curve)

            staging.commit = commit
            # how a later clean-up tells this commit happened: the chain entry it writes
            from tabdp.release._ledger import chain_entry

            staging.swap_check = {"entry": str(chain_entry(ledger, len(ledger.entries))),
                                  "spec_hash": spec.sha256}
    curator = spec.input.mode == "curator"
    return ReleaseResult(spec.output.public, spec.output.confidential, files,
                         {k.removesuffix(".parquet"): v for k, v in public.items()},
                         coverage if curator else [], left_out if curator else {})
