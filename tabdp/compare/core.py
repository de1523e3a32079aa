"""``tabdp compare``: the DP release against cell suppression or rounding, on the same data.

Curator only: the comparison reads the true tables, and everything it writes goes to the
comparison folder (by default ``<confidential>/compare``; CONFIDENTIAL), never to the public
one. With a lifetime ledger (``[ledger]``) its DP side reads the ledger read-only: units at
their lifetime budget are left out as ``tabdp run`` would leave them out, and the ledger is
never charged (the comparison is never published).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from tabdp.compare.audit import audit_system, hierarchical_constraints
from tabdp.compare.sdc import (
    TOTAL,
    Dim,
    SdcOptions,
    SdcTable,
    add_levels,
    build_dim,
    parse_sdc,
    protect,
    require_pytauargus,
)
from tabdp.exceptions import InvalidParameterError

Progress = Callable[[str], None]

#: Relative tolerance of the audit checks (LP solutions are exact to about 1e-9 of the scale).
TOL = 1e-6
LP_TOL = 1e-9
"""The audit's accuracy relative to the table's largest cell (HiGHS' tolerances)."""


@dataclass
class CompareResult:
    """Where a comparison wrote its outputs, and its summary.

    Attributes:
        folder: The comparison folder (inside the spec's confidential folder).
        json: ``compare.json``.
        html: ``compare_report.html``.
        summary: The content of ``compare.json``.
        cells: Every cell of the traditional release with its status and audit interval.
    """

    folder: Path
    json: Path
    html: Path
    summary: dict[str, Any]
    cells: pl.DataFrame = field(default_factory=pl.DataFrame)


TAU_AUDIT_MAX_CELLS = 5000
LINKED_MAX_ROUNDS = 10  # Tau-Argus re-runs of a group of linked tables (then: not consistent)
"""Largest table (cells, margins included) on which Tau-Argus' own audit runs by default."""
UNIT_COLUMN = "tabdp_unit"  # the privacy unit's column in a table's rows for Tau-Argus


def refuse_author_mode(spec: Any) -> None:
    r"""Refuse an author-mode spec: ``tabdp compare`` is a curator-only tool.

    The comparison reads the confidential data and shows unprotected values (true cell
    values, the intervals an intruder derives, per-record losses), so no query author may run
    it, with or without a curator configuration. Decided from the spec's text (or object)
    alone, before anything is read; a file that is not valid TOML is left to the spec reader.

    Args:
        spec: A spec file path or a `ReleaseSpec`.

    Raises:
        SpecError: ``input.mode = "author"`` (exit 2 in the CLI).

    Example:
        >>> import pathlib, tempfile
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "s.toml"
        >>> _ = f.write_text('[release]\nname = "x"\n[input]\nmode = "author"\n')
        >>> try:
        ...     refuse_author_mode(f)
        ... except ValueError as err:
        ...     print(str(err).splitlines()[0][:60])
        input.mode: tabdp compare is a curator-only tool: it reads t
    """
    import tomllib

    from tabdp.exceptions import SpecError

    mode = getattr(getattr(spec, "input", None), "mode", None)
    if mode is None and isinstance(spec, (str, Path)):
        try:
            inp = tomllib.loads(Path(spec).read_text("utf-8")).get("input")
        except (OSError, ValueError):
            return
        mode = inp.get("mode") if isinstance(inp, dict) else None
    if mode == "author":
        raise SpecError("input.mode", "tabdp compare is a curator-only tool: it reads the "
                                      "confidential data and shows unprotected values (true "
                                      "cell values, the intervals an intruder derives from "
                                      "a traditional release, per-record losses), so it does "
                                      "not run author-mode specs (input.mode = \"author\"), "
                                      "with or without a curator configuration. Nothing was "
                                      "read or written.\nHint: the curator runs the comparison "
                                      "on a curator-mode copy of the spec (input.path, "
                                      "mode = \"curator\"); an author can "
                                      "forecast the DP side with tabdp plan --compare.")


def _refuse_alternatives(spec: Any) -> None:
    """Refuse alternative hierarchies (sharing a level): the traditional side has one per column.

    Tau-Argus protects each key column through one hierarchy; a second grouping of the same
    codes would be published beside it unprotected against differencing (the classic
    disclosure of alternative hierarchies), so the comparison would understate the traditional
    release's risk. Decided from the spec alone.
    """
    from tabdp.exceptions import SpecError

    seen: dict[str, str] = {}
    for name, h in spec.hierarchies.items():
        for lv in h.levels:
            if lv in seen:
                raise SpecError(
                    f"hierarchies.{name}",
                    f"tabdp compare does not support alternative hierarchies: level {lv!r} is "
                    f"in hierarchies {seen[lv]!r} and {name!r}. Its traditional side protects "
                    "each key column through one hierarchy, and would leave the other grouping "
                    "open to differencing. Nothing was read or written.\nHint: compare on a "
                    "copy of the spec holding one of the two hierarchies (and the tables and "
                    "rollups that use it).")
            seen[lv] = name


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def _refuse_overlaps(spec: Any, folder: Path) -> None:
    """Refuse a comparison folder that holds, or sits inside, what it must not touch.

    Before anything is removed or made: ``--overwrite`` removes the folder as a whole, and
    making it makes its parents. It must not hold the confidential folder (a release's
    outputs), nor hold or sit inside the plan folder, the lifetime ledger or its anchor (beside
    it), or anything the release reads (`tabdp.release.spec.checks.read_paths`: the input, a
    glob's folder, the spec file, hierarchy, domain and keys files).

    Example:
        >>> import types, pathlib
        >>> out = types.SimpleNamespace(confidential=pathlib.Path("/r/conf"),
        ...                             plan=pathlib.Path("/r/plan"))
        >>> sp = types.SimpleNamespace(output=out, ledger=None, path=None, hierarchies={},
        ...     tables=(), input=types.SimpleNamespace(path=None), raw={})
        >>> _refuse_overlaps(sp, pathlib.Path("/r/conf/compare"))  # the default: fine
        >>> try:
        ...     _refuse_overlaps(sp, pathlib.Path("/r"))
        ... except ValueError as e:
        ...     print(str(e).splitlines()[0][:60])
        the comparison folder '/r' holds the confidential folder '/r
    """
    hint = ("Hint: leave out --out (it defaults to <confidential>/compare) or choose a folder of "
            "its own.")
    conf = Path(spec.output.confidential).absolute()
    if _inside(conf, folder):
        raise InvalidParameterError(
            f"the comparison folder {str(folder)!r} holds the confidential folder "
            f"{str(conf)!r}; --overwrite would remove it and making it would write among what "
            f"it holds.\n{hint}")
    from tabdp.privacy.lifetime import ledger_anchor
    from tabdp.release.spec.checks import read_paths

    base = Path(spec.path).parent if spec.path is not None else Path.cwd()
    guarded = read_paths(spec.input, spec.hierarchies, (spec.raw or {}).get("domains") or {},
                         spec.tables, base, spec.path)
    guarded.append(("the plan folder", Path(spec.output.plan)))
    if getattr(spec, "ledger", None) is not None:
        root = Path(spec.ledger.path)
        guarded += [("the lifetime ledger", root), ("the ledger's anchor", ledger_anchor(root))]
    for what, p in guarded:
        p = p.absolute()
        if _inside(p, folder) or _inside(folder, p):
            raise InvalidParameterError(
                f"the comparison folder {str(folder)!r} overlaps {what} ({str(p)!r}); "
                f"--overwrite would remove it, and writing the comparison would change it.\n"
                f"{hint}")


def _quiet(_: str) -> None:
    return None



#: Why a comparison's DP side must not be published: its reason in the DP side's manifest,
#: summary and page, and its ``NOT_FOR_PUBLICATION.txt`` (``run_release``'s internal
#: ``_not_for_publication``, written in the release's own staging).
COMPARE_COPY_REASON = (
    "This folder is the DP side of `tabdp compare`: a second, complete "
    "DP release of the same confidential data, made only to compare it with cell suppression. "
    "Its per-record losses are counted nowhere: a lifetime ledger ([ledger]) was only read "
    "(to leave out the units the real run would leave out), never charged, and the summary "
    "of the release made by `tabdp run` does not include them. Publishing it (beside or "
    "instead of the real release) would spend more than the budget the published guarantee "
    "states. Publish only the public folder of `tabdp run`.")
#: Written into ``dp_release/`` before the DP release runs (its ``tables/`` get theirs from
#: the release itself, `COMPARE_COPY_REASON`).
COMPARE_COPY_NOTICE = "NOT FOR PUBLICATION\n\n" + COMPARE_COPY_REASON + "\n"


def compare(spec: Any, sdc: str | SdcOptions | None = None, *, out: str | Path | None = None,
            overwrite: bool = False, test_seed: bool = False, tau_audit: bool | None = None,
            progress: Progress | None = None) -> CompareResult:
    """Compare the spec's DP release with a traditional release of the same tables.

    Runs the DP release as ``tabdp run`` does (its outputs go to ``<out>/dp_release``), and
    protects every table with the Tau-Argus engine (``pytauargus``): the primary rules of
    ``sdc``, then secondary suppression (OPT or MOD) with the spec's hierarchies as
    hierarchical dimensions, or controlled rounding (RND). Audits every withheld cell against
    everything the traditional release publishes (all its tables, jointly), measures the
    utility of both releases against the truth, and writes ``compare.json``,
    ``compare_report.html`` and ``sdc_cells.parquet`` to ``out``.

    With a lifetime ledger (``[ledger]``) the DP side reads it read-only, as ``tabdp run``
    opens it (locked and verified before any data is read, refused the same way), and leaves
    out the units at their lifetime budget exactly as the run would; it charges nothing (no
    chain entry, history, state or anchor change): the comparison is never published.
    ``compare.json`` says so (``lifetime_ledger``) with what the filter left out.

    Args:
        spec: A spec file path or a `ReleaseSpec`.
        sdc: Traditional options (`parse_sdc()` text or
            `SdcOptions`; default ``p=10; secondary=MOD``).
        out: Output folder (default ``<confidential>/compare``); refused inside the public
            folder.
        overwrite: Replace an existing output folder.
        test_seed: Allow a seeded spec (tests only), as ``tabdp run --test-seed``.
        tau_audit: Also run Tau-Argus' own audit on each suppressed table and compare it
            with the LP audit under Tau-Argus' a-priori bounds (0 to 1.5 × the table's
            largest cell). ``None`` (default): only on tables of at most
            `TAU_AUDIT_MAX_CELLS` cells (Tau-Argus' audit of a 60,000-cell table had not
            finished after 46 minutes here; the LP audit is the audit either way).
        progress: Optional callback receiving a line of text per step.

    Returns:
        The output locations and the summary.

    Raises:
        UnsupportedBackendError: ``pytauargus`` is not installed (``pip install
            "tabdp[sdc]"``).
        InvalidParameterError: Bad ``sdc`` options; the output folder is inside the public
            folder, or exists and ``overwrite`` is false.
        SpecError: An author-mode spec (`refuse_author_mode`): compare is for the curator.
        LedgerError: With ``[ledger]``: the ledger is in use, does not verify (or is an older
            copy), or is of another series or budget (before any data is read, as for a run).

    Example:
        >>> import pathlib, tabdp, tempfile
        >>> from tabdp.compare import compare
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> res = compare(root / "examples" / "cbp_release.toml",
        ...               out=pathlib.Path(tempfile.mkdtemp()) / "cmp")  # doctest: +SKIP
    """
    from tabdp.release.runner import NOT_FOR_PUBLICATION
    from tabdp.release.spec import ReleaseSpec, load_spec

    say = progress or _quiet
    refuse_author_mode(spec)
    opts = sdc if isinstance(sdc, SdcOptions) else parse_sdc(sdc)
    require_pytauargus()
    if not isinstance(spec, ReleaseSpec):
        spec = load_spec(Path(spec))
    _refuse_alternatives(spec)
    folder = Path(out) if out is not None else spec.output.confidential / "compare"
    folder = folder.absolute()
    if _inside(folder, spec.output.public) or _inside(spec.output.public, folder):
        raise InvalidParameterError(
            f"the comparison folder {str(folder)!r} overlaps the public folder "
            f"{str(spec.output.public)!r}; the comparison holds true (confidential) values.\n"
            "Hint: leave out --out (it defaults to <confidential>/compare) or choose a folder "
            "outside the public one.")
    _refuse_overlaps(spec, folder)
    if folder.exists():
        if not overwrite:
            raise InvalidParameterError(
                f"the comparison folder {str(folder)!r} already exists; tabdp never "
                "overwrites outputs silently.\nHint: remove it, choose another --out, or pass "
                "--overwrite.")
        shutil.rmtree(folder)
    # owner-only from the start (whatever the umask): nothing inside can be reached by others
    # while it is written; every file and folder made 0600 / 0700 at the end (`_owner_only`)
    folder.mkdir(parents=True, mode=0o700)
    folder.chmod(0o700)
    try:
        return _compare_into(spec, opts, folder, say, test_seed=test_seed, tau_audit=tau_audit)
    except BaseException:
        # refused before anything was written (a lifetime ledger in use or not verifying, a
        # seeded spec...): no empty folder is left behind for the retry to stumble on
        # (dp_release/NOT_FOR_PUBLICATION.txt, written before the DP release, is not output)
        marker = os.path.join(folder, "dp_release", NOT_FOR_PUBLICATION)
        if all(os.path.join(base, f) == marker for base, _, files in os.walk(folder)
               for f in files):
            shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        if folder.exists():
            _owner_only(folder)


def _owner_only(folder: Path) -> None:
    """Make every folder under ``folder`` (itself included) 0700 and every file 0600.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> (d / "sub").mkdir(mode=0o755)
        >>> _ = (d / "sub" / "f.txt").write_text("x")
        >>> _owner_only(d)
        >>> mode = lambda p: oct(p.stat().st_mode & 0o777)
        >>> mode(d / "sub"), mode(d / "sub" / "f.txt")
        ('0o700', '0o600')
    """
    for base, _, files in os.walk(folder):
        with contextlib.suppress(OSError):
            os.chmod(base, 0o700)
        for name in files:
            p = os.path.join(base, name)
            if not os.path.islink(p):
                with contextlib.suppress(OSError):
                    os.chmod(p, 0o600)


def _compare_into(spec: Any, opts: SdcOptions, folder: Path, say: Callable[[str], None], *,
                  test_seed: bool, tau_audit: bool | None) -> CompareResult:
    """`compare`'s work, once its (owner-only) folder is made."""
    from tabdp.release.runner import NOT_FOR_PUBLICATION, run_release

    timings: dict[str, float] = {}
    t_all = time.perf_counter()

    # -- the DP release, exactly as `tabdp run` (outputs inside the comparison folder) --------
    say("DP release (as tabdp run)")
    t0 = time.perf_counter()
    dp_dir = folder / "dp_release"
    dp_spec = dataclasses.replace(spec, output=dataclasses.replace(
        spec.output, public=dp_dir / "tables", confidential=dp_dir / "confidential",
        plan=dp_dir / "plan"))
    # a lifetime ledger is read, never charged: the comparison is never published, but its DP
    # side leaves out the units the real run would leave out
    # a complete DP release of the same data, whose losses come on top of the real release's:
    # marked so that nobody publishes it beside (or instead of) the one from tabdp run. From
    # the start: dp_release/ before the run; its tables/ (manifest, summary, page and
    # NOT_FOR_PUBLICATION.txt) by the release, in the staging it writes its outputs in (a
    # crash after the run left a folder whose manifest said publishable: stop 63)
    dp_dir.mkdir(mode=0o700)
    (dp_dir / NOT_FOR_PUBLICATION).write_text(COMPARE_COPY_NOTICE, encoding="utf-8")
    dp = run_release(dp_spec, test_seed=test_seed, _ledger_read_only=True,
                     _not_for_publication=("comparison_copy", COMPARE_COPY_REASON))
    timings["dp_release"] = time.perf_counter() - t0

    # -- the traditional release ---------------------------------------------------------------
    say(f"traditional release ({opts.describe()})")
    t0 = time.perf_counter()
    micro = _read_input(spec)
    timings["read_input"] = time.perf_counter() - t0
    axes = _axes(spec)
    sdc_tables: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    t0 = time.perf_counter()
    for t in spec.tables:
        if not t.by:
            skipped.append({"table": t.name, "reason": "no key columns (a single national "
                            "cell): Tau-Argus needs at least one dimension"})
            continue
        measures = list(t.measures) if t.kind == "sum" else ["count"]
        cols = list(t.by)
        dims = [build_dim(c, spec.domains[c].to_list() if c in spec.domains else [], 
                          spec.hierarchies) for c in cols]
        data, spanning, unit_col = _table_micro(spec, micro, t, cols, dims)
        if spanning:
            say(f"  {spanning} unit(s) of {t.name} have rows in several finest cells: "
                "Tau-Argus judges each unit as one contributor (its holding) at every cell")
        for m in measures:
            say(f"  Tau-Argus: {t.name} / {m}")
            n_cells = math.prod(len(d.codes) for d in dims)
            own_audit = (n_cells <= TAU_AUDIT_MAX_CELLS) if tau_audit is None else tau_audit
            tab = protect(data, cols, m, dims, opts, count=t.kind == "count",
                          workdir=folder / "tau" / f"{t.name}__{m}", audit=own_audit,
                          unit=unit_col)
            cells = add_levels(tab.cells, cols, dims)
            cells = cells.with_columns(_canonical(cols, dims, axes).alias("cell_key"))
            sdc_tables.append({"table": t.name, "measure": m, "kind": t.kind, "by": cols,
                               "dims": dims, "sdc": tab, "cells": cells, "micro": data,
                               "audit": own_audit, "units_in_several_cells": spanning,
                               "unit": unit_col})
    timings["tau_argus"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    linked = _protect_linked(sdc_tables, opts, folder, axes, say)
    for x in sdc_tables:
        x.pop("micro", None)
    timings["tau_argus_linked_rounds"] = time.perf_counter() - t0

    # -- audit -------------------------------------------------------------------------------
    say("audit (LP min/max of every withheld cell over all published tables)")
    t0 = time.perf_counter()
    audit_info = _audit_all(sdc_tables)
    timings["audit"] = time.perf_counter() - t0
    tau_check: dict[str, Any] = {}
    if any(x["sdc"].tau_audit is not None for x in sdc_tables):
        say("Tau-Argus' own audit, and the LP audit under its a-priori bounds")
        t0 = time.perf_counter()
        tau_check = _tau_audit_check(sdc_tables)
        timings["tau_audit_check"] = time.perf_counter() - t0
    skipped_audit = [x["table"] + " / " + x["measure"] for x in sdc_tables
                     if x["sdc"].tau_audit is None and x["sdc"].method in ("OPT", "MOD")]
    if skipped_audit:
        tau_check["not_run"] = {
            "tables": skipped_audit,
            "reason": ("switched off" if tau_audit is False else
                       f"tables of more than {TAU_AUDIT_MAX_CELLS} cells (Tau-Argus' audit "
                       "is slow there; the LP audit above is the audit, and agrees with "
                       "Tau-Argus' on smaller tables)")}

    # -- utility and risk --------------------------------------------------------------------
    say("utility and risk")
    t0 = time.perf_counter()
    utility = _utility(spec, dp.tables, sdc_tables)
    coverage = _coverage(spec, dp.tables, sdc_tables)
    losses = pl.read_parquet(dp.confidential / "per_record_losses.parquet")
    risk = {"dp": _dp_risk(losses, spec.release.delta),
            "sdc": _sdc_risk(sdc_tables)}
    timings["utility_risk"] = time.perf_counter() - t0

    all_cells = pl.concat(
        [x["cells"].with_columns(pl.lit(x["table"]).alias("table"),
                                 pl.lit(x["measure"]).alias("measure"))
         .select(["table", "measure", "cell_key", "level", "value", "freq", "x1", "x2",
                  "status", "lpl", "upl", "published", "released", "audit_lower",
                  "audit_upper", "protected", "forced"])
         for x in sdc_tables], how="vertical_relaxed") if sdc_tables else pl.DataFrame()
    timings["total"] = time.perf_counter() - t_all
    summary: dict[str, Any] = {
        "confidential": True,
        "note": ("CONFIDENTIAL: built from the true tables (utility against the truth, audit "
                 "intervals, per-record losses). Never publish this file."),
        "release": spec.release.name,
        "sdc": opts.as_dict() | {"described": opts.describe()},
        "linked": linked,
        "tables": [{"table": x["table"], "measure": x["measure"], "kind": x["kind"],
                    "by": x["by"], "method": x["sdc"].method, "rounding_base": x["sdc"].base,
                    "cells": x["cells"].height, "tau_seconds": x["sdc"].seconds,
                    # a unit in several finest cells: Tau-Argus' holding, one contributor
                    # at every cell (docs/compare.md, "How contributors are counted")
                    "units_in_several_finest_cells": x.get("units_in_several_cells", 0),
                    "units_as_holdings": x["sdc"].holding,
                    "tau_steps_seconds": x["sdc"].steps,
                    "statuses": dict(x["cells"]["status"].value_counts()
                                     .sort("status").iter_rows())}
                   for x in sdc_tables],
        "skipped": skipped,
        "audit": audit_info,
        "tau_audit_check": tau_check,
        "utility": utility,
        "coverage": coverage,
        "risk": risk,
        "timings_seconds": timings,
        "dp_release_folder": str(dp_dir),
        "lifetime_ledger": _lifetime_note(spec, dp_dir, dp.left_out),
    }
    folder_json = folder / "compare.json"
    folder_json.write_text(json.dumps(_jsonable(summary), indent=2) + "\n", encoding="utf-8")
    if all_cells.height:
        all_cells.write_parquet(folder / "sdc_cells.parquet")
    from tabdp.report.compare import render_compare_html

    html_path = folder / "compare_report.html"
    html_path.write_text(render_compare_html(summary, all_cells, losses), encoding="utf-8")
    # Tau-Argus' working files hold the microdata: keep them only inside this folder
    return CompareResult(folder, folder_json, html_path, summary, all_cells)


def _lifetime_note(spec: Any, dp_dir: Path, left_out: Mapping[str, Any]) -> dict[str, Any]:
    """CONFIDENTIAL: how the DP side used the spec's lifetime ledger (read, never charged).

    Example:
        >>> import types
        >>> _lifetime_note(types.SimpleNamespace(ledger=None), Path("."), {})["applied"]
        False
    """
    led = getattr(spec, "ledger", None)
    if led is None:
        return {"applied": False, "charged": False,
                "note": "no [ledger] in the spec: no lifetime filter (as in tabdp run)."}
    lifetime: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        lifetime = json.loads((dp_dir / "tables" / "summary.json").read_text("utf-8")).get(
            "lifetime") or {}
    return {
        "applied": True, "charged": False, "ledger": str(led.path), "series": led.series,
        "lifetime_budget": led.lifetime_budget,
        # the series' releases before this one (the run's summary lists them, this one last)
        "releases_read": list(lifetime.get("releases") or [])[:-1],
        "left_out": dict(left_out),
        "note": ("The DP side read the lifetime ledger read-only (locked and verified as tabdp "
                 "run does) and left out every unit whose lifetime loss would pass the "
                 "series' lifetime budget, as the real run would; it charged nothing (no "
                 "chain entry, history, state or anchor change). Its losses are counted "
                 "nowhere: never publish dp_release/.")}


# -- linked tables ---------------------------------------------------------------------------

def _shared_groups(tables: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Tables of the same measure (kind and column) that share at least one cell."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for x in tables:
        by.setdefault((x["kind"], x["measure"]), []).append(x)
    out = []
    for group in by.values():
        if len(group) < 2:
            continue
        seen: dict[str, int] = {}
        for i, x in enumerate(group):
            for k in x["cells"]["cell_key"].to_list():
                seen[k] = seen.get(k, 0) | (1 << i)
        if any(v & (v - 1) for v in seen.values()):
            out.append(group)
    return out


def _protect_linked(tables: list[dict[str, Any]], opts: SdcOptions, folder: Path,
                    axes: Sequence[str], say: Callable[[str], None]) -> dict[str, Any]:
    """Protect tables that share cells as linked tables: Tau-Argus rounds until consistent.

    An iteration around Tau-Argus in the spirit of rtauargus' ``tab_multi_manager`` (no
    suppression solver of tabdp's own): every table was protected on its own; then every cell
    withheld in one table of a group and published in another that has it is suppressed
    a-priori in that other table (manual unsafe, protection levels: the rule's when the cell
    is primary somewhere, else p% of its value), and that table is protected again by
    Tau-Argus with every cell forced so far; until no table publishes a cell another
    withholds (the forced sets only grow, so this ends), at most `LINKED_MAX_ROUNDS` re-runs.
    Each group's rounds replace ``sdc`` and ``cells`` of its tables in place.

    Returns:
        What was done (``compare.json`` → ``linked``).
    """
    info: dict[str, Any] = {"mode": opts.linked, "applied": False, "groups": []}
    if opts.linked == "off":
        info["reason"] = "switched off (linked=off): each table protected on its own"
        return info
    if opts.secondary == "RND":
        info["reason"] = ("controlled rounding publishes every cell: no suppression to carry "
                          "between tables")
        return info
    groups = _shared_groups(tables)
    if not groups:
        info["reason"] = "no two tables of the same measure share a cell"
        return info
    info["applied"] = True
    margin = float(opts.p if opts.p is not None else 10) / 100.0
    for group in groups:
        names = [f"{x['table']} / {x['measure']}" for x in group]
        forced: list[dict[tuple[str, ...], tuple[float, float]]] = [{} for _ in group]
        rounds: list[dict[str, Any]] = []
        converged = False
        for rnd in range(1, LINKED_MAX_ROUNDS + 2):
            withheld: dict[str, tuple[float, float]] = {}
            for x in group:
                c = x["cells"].filter(~pl.col("published"))
                for k, lpl, upl, v, st in c.select(
                        "cell_key", "lpl", "upl", "value", "status").iter_rows():
                    prot = ((float(lpl), float(upl)) if st == "U"
                            else (margin * abs(float(v)), margin * abs(float(v))))
                    old = withheld.get(k, (0.0, 0.0))
                    withheld[k] = (max(old[0], prot[0]), max(old[1], prot[1]))
            new_counts = []
            for i, x in enumerate(group):
                c = x["cells"].filter(pl.col("published")
                                      & pl.col("cell_key").is_in(list(withheld)))
                add = {tuple(r[:-1]): withheld[r[-1]]
                       for r in c.select([*x["by"], "cell_key"]).iter_rows()}
                forced[i].update(add)
                new_counts.append(len(add))
            if not any(new_counts):
                converged = True
                break
            if rnd > LINKED_MAX_ROUNDS:
                info.setdefault("not_consistent", {})[" + ".join(names)] = dict(
                    zip(names, new_counts, strict=True))
                break
            say(f"  linked tables, round {rnd}: "
                + ", ".join(f"{n} cells forced in {nm}"
                            for n, nm in zip(new_counts, names, strict=True) if n))
            rounds.append({"round": rnd, "forced_new": dict(zip(names, new_counts, strict=True))})
            for i, x in enumerate(group):
                if not new_counts[i]:
                    continue
                tab = protect(x["micro"], x["by"], x["measure"], x["dims"], opts,
                              count=x["kind"] == "count", audit=x["audit"],
                              workdir=folder / "tau" / f"{x['table']}__{x['measure']}__r{rnd}",
                              forced=forced[i], unit=x.get("unit"))
                tab.seconds += x["sdc"].seconds
                cells = add_levels(tab.cells, x["by"], x["dims"])
                x["sdc"] = tab
                x["cells"] = cells.with_columns(
                    _canonical(x["by"], x["dims"], axes).alias("cell_key"))
        info["groups"].append({
            "tables": names, "measure": group[0]["measure"], "kind": group[0]["kind"],
            "rounds": rounds, "reruns": len(rounds), "converged": converged,
            "forced_cells": dict(zip(names, (len(f) for f in forced), strict=True))})
        if not converged:
            say(f"  linked tables {names}: not consistent after {LINKED_MAX_ROUNDS} rounds")
    return info


# -- input -----------------------------------------------------------------------------------

def _read_input(spec: Any) -> pl.LazyFrame:
    """The input after the spec's rules, as the DP run reads it (the runner's own code)."""
    from tabdp.release.runner import read_input

    return read_input(spec)


def _table_micro(spec: Any, lf: pl.LazyFrame, t: Any, cols: list[str], dims: list[Dim]
                 ) -> tuple[pl.DataFrame, int, str | None]:
    """One row per contributor (unit) and finest cell, and the units in several finest cells.

    Returns the unit's contribution to each measure (or 1) per finest cell, the number of
    units with rows in more than one finest cell of the table (0 in row mode), and the name
    of the column of the rows that holds the unit (``None`` in row mode, where a record is
    the unit and the rows have no unit column). `protect()` is given that column: a unit in
    several finest cells is then Tau-Argus' holding, one contributor at every cell
    (confidential: for the curator).
    """
    from tabdp.release.runner import ROW_ID

    unit = spec.input.unit or ROW_ID
    names = {*cols, *(t.measures if t.kind != "count" else ["count"])}
    unit_col = UNIT_COLUMN
    while unit_col in names:
        unit_col += "_"
    keep = pl.all_horizontal([pl.col(c).cast(pl.String).is_in(
        [k for k, v in d.level.items() if v == c]) for c, d in zip(cols, dims, strict=True)])
    base = lf.with_columns([pl.col(c).cast(pl.String) for c in cols]).filter(keep)
    if getattr(t, "keys_file", None) is not None:
        # the table's population is the rows whose finest keys are in its key set, as in the
        # DP release (every level, docs/hierarchy.md): a row of a combination outside it is
        # in no cell, margin or total of the table, on either side of the comparison
        from tabdp.release.spec import read_keys

        allowed = read_keys(t.keys_file, cols, spec.domains).select(
            [pl.col(c).cast(pl.String) for c in cols]).unique()
        base = base.join(allowed.lazy(), on=cols, how="semi")
    if t.kind == "count":
        agg = [pl.lit(1.0).alias("count")]
        out = base.group_by([unit, *cols]).agg(pl.len()).with_columns(agg).drop("len")
    else:
        ms = list(t.measures)
        out = (base.filter(pl.all_horizontal([pl.col(m).is_not_null() for m in ms]))
               .group_by([unit, *cols]).agg([pl.col(m).cast(pl.Float64).sum() for m in ms]))
    data = out.collect()
    if spec.input.unit is None:
        return data.drop(unit), 0, None
    spanning = int(data.group_by(unit).len().filter(pl.col("len") > 1).height)
    return data.rename({unit: unit_col}), spanning, unit_col


def _axes(spec: Any) -> list[str]:
    """The axes of the canonical cell key: every hierarchy, then every flat key column."""
    names = sorted(spec.hierarchies)
    flat: list[str] = []
    for t in spec.tables:
        for c in t.by:
            if not any(c in h.levels for h in spec.hierarchies.values()) and c not in flat:
                flat.append(c)
    return names + sorted(flat)


def _canonical(cols: Sequence[str], dims: Sequence[Dim], axes: Sequence[str]) -> pl.Expr:
    """A cell's identity across tables: ``axis=level:code`` for every axis (Total if absent).

    Cells of different tables with the same key are the same statistic (e.g. payroll by
    state × sector in a county table and in a state × 6-digit table).
    """
    parts: list[pl.Expr] = []
    for ax in axes:
        hit = [(c, d) for c, d in zip(cols, dims, strict=True) if (d.hierarchy or c) == ax]
        if hit:
            c, d = hit[0]
            parts.append(pl.lit(f"{ax}=") + pl.col(c).replace_strict(
                dict(d.level), return_dtype=pl.String) + pl.lit(":") + pl.col(c))
        else:
            parts.append(pl.lit(f"{ax}=total:{TOTAL}"))
    return pl.concat_str(parts, separator="|")


# -- audit -----------------------------------------------------------------------------------

def _table_matrix(x: Mapping[str, Any]) -> tuple[sp.csr_matrix, np.ndarray]:
    """The table's equations and, for each equation column, the row of ``cells``."""
    dims: list[Dim] = x["dims"]
    cells: pl.DataFrame = x["cells"]
    shape = tuple(len(d.codes) for d in dims)
    idx = [cells[c].replace_strict({k: i for i, k in enumerate(d.codes)},
                                   return_dtype=pl.Int64).to_numpy()
           for c, d in zip(x["by"], dims, strict=True)]
    flat = np.ravel_multi_index(tuple(idx), shape)
    row_of = np.full(int(np.prod(shape)), -1, dtype=np.int64)
    row_of[flat] = np.arange(cells.height)
    return hierarchical_constraints(dims), row_of


def _audit_all(tables: list[dict[str, Any]]) -> dict[str, Any]:
    """Joint audit per measure: every published cell of every table, all equations."""
    info: dict[str, Any] = {"groups": []}
    for x in tables:
        x["cells"] = x["cells"].with_columns(pl.lit(None, dtype=pl.Float64).alias("audit_lower"),
                                             pl.lit(None, dtype=pl.Float64).alias("audit_upper"),
                                             pl.lit(None, dtype=pl.Boolean).alias("protected"))
    by_measure: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for x in tables:
        key = (x["kind"], x["measure"])
        by_measure.setdefault(key, []).append(x)
    for (kind, measure), group in by_measure.items():
        keys = pl.concat([x["cells"].select("cell_key", "value") for x in group]).unique(
            "cell_key", keep="first", maintain_order=True)
        gid = {k: i for i, k in enumerate(keys["cell_key"].to_list())}
        n = len(gid)
        values = keys["value"].to_numpy().astype(np.float64)
        rounding = all(x["sdc"].method == "RND" for x in group)
        published = np.zeros(n, dtype=bool)
        withheld = np.zeros(n, dtype=bool)
        mats = []
        lb = np.zeros(n)
        ub = np.full(n, np.inf)
        cell_gids = []
        for x in group:
            g = np.array([gid[k] for k in x["cells"]["cell_key"].to_list()], dtype=np.int64)
            cell_gids.append(g)
            pub = x["cells"]["published"].to_numpy()
            if x["sdc"].method == "RND":
                r = x["cells"]["released"].to_numpy().astype(np.float64)
                b = float(x["sdc"].base or 0)
                lb[g] = np.maximum(lb[g], r - b)
                ub[g] = np.minimum(ub[g], r + b)
            else:
                published[g[pub]] = True
                withheld[g[~pub]] = True
            a_t, row_of = _table_matrix(x)
            a = a_t.tocoo()
            cols = g[row_of[a.col]]
            mats.append(sp.csr_matrix((a.data, (a.row, cols)), shape=(a.shape[0], n)))
        amat = sp.vstack(mats).tocsr() if mats else sp.csr_matrix((0, n))
        if rounding:
            # every cell is unknown within its rounding interval; audit the primary cells
            targets = np.unique(np.concatenate([
                g[(x["cells"]["status"] == "U").to_numpy()]
                for g, x in zip(cell_gids, group, strict=True)]))
            res = audit_system(amat, values, np.zeros(n, dtype=bool), targets, lb, ub)
        else:
            targets = np.flatnonzero(withheld & ~published)
            res = audit_system(amat, values, published, targets, 0.0, np.inf)
        lo = np.full(n, np.nan)
        hi = np.full(n, np.nan)
        lo[res.targets] = res.lower
        hi[res.targets] = res.upper
        linked = np.flatnonzero(withheld & published)   # withheld here, published elsewhere
        lo[linked] = values[linked]
        hi[linked] = values[linked]
        for g, x in zip(cell_gids, group, strict=True):
            c = x["cells"]
            audited = ~c["published"].to_numpy() if not rounding else (
                c["status"] == "U").to_numpy()
            lo_c = np.where(audited, lo[g], np.nan)
            hi_c = np.where(audited, hi[g], np.nan)
            v = c["value"].to_numpy()
            scale = max(float(np.nanmax(np.abs(values), initial=1.0)), 1.0)
            need = (c["status"] == "U").to_numpy()
            # slack: relative to the cell, plus the solver's accuracy in the table's units
            # (a slack relative to the largest cell would hide under-protected small cells)
            slack = TOL * np.maximum(np.abs(v), 1.0) + LP_TOL * scale
            ok = ((v - lo_c >= c["lpl"].to_numpy() - slack)
                  & (hi_c - v >= c["upl"].to_numpy() - slack))
            prot = np.where(audited & need, ok, np.where(audited, True, np.nan))
            x["cells"] = c.with_columns(
                pl.Series("audit_lower", lo_c), pl.Series("audit_upper", hi_c),
                pl.Series("protected", [None if (isinstance(p, float) and math.isnan(p))
                                        else bool(p) for p in prot], dtype=pl.Boolean))
        info["groups"].append({
            "measure": measure, "kind": kind, "tables": [x["table"] for x in group],
            "cells": n, "equations": int(amat.shape[0]),
            "withheld": int(withheld.sum()), "audited": int(res.targets.size),
            "linked_disclosures": int(linked.size),
            "pinned_by_one_equation": int(res.exact.size),
            "linear_programmes": res.n_lp, "components": res.components,
            "largest_component": res.largest_component, "seconds": res.seconds,
            "bounds": ("rounding intervals (published ± base), non-negative" if rounding
                       else "non-negative, no upper bound")})
    return info


def _tau_audit_check(tables: list[dict[str, Any]]) -> dict[str, Any]:
    """Tau-Argus' audit of each suppressed table against the LP with the same bounds."""
    out: dict[str, Any] = {"tables": [], "max_abs_diff": 0.0, "max_rel_diff": 0.0}
    for x in tables:
        tab: SdcTable = x["sdc"]
        if tab.tau_audit is None or tab.method == "RND":
            continue
        rows = [r for r in tab.tau_audit if "cell" in r]
        apriori: list[Any] = next((r["apriori_all"] for r in tab.tau_audit
                                   if "apriori_all" in r), [])
        c = x["cells"]
        v = c["value"].to_numpy().astype(np.float64)
        pub = c["published"].to_numpy()
        a_t, row_of = _table_matrix(x)
        a_c = a_t.tocoo()
        a = sp.csr_matrix((a_c.data, (a_c.row, row_of[a_c.col])), shape=(a_c.shape[0], c.height))
        targets = np.flatnonzero(~pub)
        # Tau-Argus' a-priori bounds, cell by cell (its JJ file): 0 (or 1.5 x a negative
        # minimum) to 1.5 x the largest cell, narrower for some primary cells
        tau_cell = c["tau_cell"].to_numpy()
        where = {int(k): i for i, k in enumerate(tau_cell)}
        lo = np.full(c.height, min(0.0, 1.5 * float(v.min())) if v.size else 0.0)
        hi = np.full(c.height, max(0.0, 1.5 * float(v.max())) if v.size else 0.0)
        for k, blo, bhi in apriori:
            if int(k) in where:
                lo[where[int(k)]], hi[where[int(k)]] = blo, bhi
        res = audit_system(a, v, pub, targets, lo, hi)
        tau = {int(r["cell"]): (float(r["min"]), float(r["max"])) for r in rows}
        diffs = []
        for k, i in enumerate(targets):
            got = tau.get(int(tau_cell[i]))
            if got is None:
                continue
            diffs.append((abs(got[0] - res.lower[k]), abs(got[1] - res.upper[k])))
        d = np.array(diffs).reshape(-1, 2)
        scale = max(float(np.abs(v).max(initial=1.0)), 1.0)
        mx = float(d.max(initial=0.0))
        out["tables"].append({"table": x["table"], "measure": x["measure"],
                              "cells_compared": int(d.shape[0]), "tau_cells": len(rows),
                              "apriori_bounds": "Tau-Argus' own, per cell",
                              "max_abs_diff": mx, "max_rel_diff": mx / scale,
                              "lp_seconds": res.seconds})
        out["max_abs_diff"] = max(out["max_abs_diff"], mx)
        out["max_rel_diff"] = max(out["max_rel_diff"], mx / scale)
    return out


# -- utility ---------------------------------------------------------------------------------

def _dp_levels(t: Any) -> list[tuple[str, tuple[str, ...], dict[str, str]]]:
    """(output name, by columns, table column → rollup column) of a table and its rollups."""
    out = [(t.name, tuple(t.by), {c: c for c in t.by})]
    for r in t.rollups:
        m: dict[str, str] = {}
        for rc in r.by:
            fine = rc if rc in t.by else r.maps.get(rc, (None, None))[1]
            if fine is not None:
                m[fine] = rc
        # the runner's file names: <table>__<level>[_direct]; the direct release first, so a
        # level released direct = true is scored on what its user publishes (the one-draw
        # direct estimate), not on the rollup of the finer cells
        if r.direct:
            out.append((f"{t.name}__{r.label}_direct", tuple(r.by), m))
        out.append((f"{t.name}__{r.label}", tuple(r.by), m))
    return out


def _dp_cells(spec: Any, dp_tables: Mapping[str, pl.DataFrame], x: Mapping[str, Any]
              ) -> pl.DataFrame:
    """The DP estimates of one table/measure at every level, joined to the true cells.

    A cell present in several DP files keeps the first in `_dp_levels` order: the table, then
    per rollup its ``_direct`` release where the level has one, else the rollup.
    """
    t = next(t for t in spec.tables if t.name == x["table"])
    cols = x["by"]
    frames = []
    for name, _by, m in _dp_levels(t):
        df = dp_tables.get(name)
        if df is None:
            continue
        meas = "count" if x["kind"] == "count" else x["measure"]
        if "measure" in df.columns:
            df = df.filter(pl.col("measure") == meas)
        exprs = [(pl.col(m[c]).cast(pl.String) if c in m else pl.lit(TOTAL)).alias(c)
                 for c in cols]
        frames.append(df.select(exprs + [pl.col("estimate").cast(pl.Float64),
                                         pl.col("flag").fill_null("").alias("flag")])
                      .with_columns(pl.lit(name).alias("dp_table")))
    if not frames:
        return pl.DataFrame()
    est = pl.concat(frames).unique(cols, keep="first", maintain_order=True)
    return est.join(x["cells"].select([*cols, "level", "value", "freq", "published",
                                       "released"]), on=cols, how="inner")


def _rel(err: np.ndarray, truth: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(truth > 0, np.abs(err) / truth, np.nan)


def _stats(est: np.ndarray, truth: np.ndarray, usable: np.ndarray) -> dict[str, Any]:
    rel = _rel(est - truth, truth)[usable]
    rel = rel[np.isfinite(rel)]
    tot = float(truth[usable].sum())
    return {"median_rel_error": float(np.median(rel)) if rel.size else None,
            "p90_rel_error": float(np.quantile(rel, 0.9)) if rel.size else None,
            "rel_bias": float((est[usable] - truth[usable]).sum() / tot) if tot > 0 else None}


def _utility(spec: Any, dp_tables: Mapping[str, pl.DataFrame],
             tables: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per table, measure, level and method: published, usable, errors, bias."""
    rows: list[dict[str, Any]] = []
    for x in tables:
        dpc = _dp_cells(spec, dp_tables, x)
        levels = dpc["level"].unique(maintain_order=True).to_list() if dpc.height else []
        for lv in levels:
            d = dpc.filter(pl.col("level") == lv)
            truth = d["value"].to_numpy()
            est = d["estimate"].to_numpy()
            flag = d["flag"].to_list()
            published = np.array([("S" not in f) for f in flag]) & np.isfinite(est)
            usable = published & np.array([not any(ch in f for ch in "CSX") for f in flag])
            rows.append({"table": x["table"], "measure": x["measure"], "level": lv,
                         "method": "DP", "cells": d.height,
                         "published_share": float(published.mean()),
                         "usable_share": float(usable.mean())}
                        | _stats(np.where(usable, est, 0.0), truth, usable))
            s_pub = d["published"].to_numpy()
            s_rel = d["released"].fill_null(0.0).to_numpy()
            rows.append({"table": x["table"], "measure": x["measure"], "level": lv,
                         "method": x["sdc"].method if x["sdc"].method != "none" else "none",
                         "cells": d.height, "published_share": float(s_pub.mean()),
                         "usable_share": float(s_pub.mean())}
                        | _stats(s_rel, truth, s_pub))
        # levels only the traditional table publishes (e.g. county totals)
        c = x["cells"]
        for lv in c["level"].unique(maintain_order=True).to_list():
            if lv in levels:
                continue
            d = c.filter(pl.col("level") == lv)
            s_pub = d["published"].to_numpy()
            rows.append({"table": x["table"], "measure": x["measure"], "level": lv,
                         "method": x["sdc"].method, "cells": d.height,
                         "published_share": float(s_pub.mean()),
                         "usable_share": float(s_pub.mean()), "not_in_dp_release": True}
                        | _stats(d["released"].fill_null(0.0).to_numpy(),
                                 d["value"].to_numpy(), s_pub))
    return rows


def _coverage(spec: Any, dp_tables: Mapping[str, pl.DataFrame],
              tables: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Small areas: share of finest-geography codes with any usable, non-empty cell.

    Both methods are scored on the same cells: the levels the DP release publishes (``sdc``).
    The traditional table also holds margins the DP spec does not release (e.g. county totals
    over all sectors); its coverage counting them too is ``sdc_all_levels`` (review rev63p:
    ``sdc`` counted a county whose only published cell was such a margin, which the DP side
    was never given).
    """
    out: list[dict[str, Any]] = []
    for x in tables:
        geo = [(c, d) for c, d in zip(x["by"], x["dims"], strict=True) if d.hierarchy]
        if not geo:
            continue
        col, dim = geo[0]
        c = x["cells"].filter(pl.col(col).is_in([k for k, v in dim.level.items() if v == col])
                              & (pl.col("freq") > 0))
        areas = c[col].n_unique()
        if areas == 0:
            continue
        sdc_all = c.filter(pl.col("published"))[col].n_unique() / areas
        dpc = _dp_cells(spec, dp_tables, x)
        dp_cov = None
        levels: list[str] = []
        sdc_cov = sdc_all
        if dpc.height:
            dpu = dpc.filter(pl.col(col).is_in(c[col].unique().to_list())
                             & (pl.col("freq") > 0)
                             & ~pl.col("flag").str.contains("[CSX]"))
            dp_cov = dpu[col].n_unique() / areas
            levels = sorted(set(c["level"].to_list()) & set(dpc["level"].to_list()))
            sdc_cov = c.filter(pl.col("published") & pl.col("level").is_in(levels))[
                col].n_unique() / areas
        out.append({"table": x["table"], "measure": x["measure"], "area_level": col,
                    "areas_with_data": areas, "dp": dp_cov, "sdc": sdc_cov,
                    "sdc_all_levels": sdc_all, "levels": levels,
                    "method": x["sdc"].method})
    return out


# -- risk ------------------------------------------------------------------------------------

def odds_factor(epsilon: float) -> float:
    """The factor e^ε of an (ε, δ) bound; ``inf`` where it exceeds the largest float.

    Never a smaller number than e^ε: until review r84 the factor was computed as
    ``exp(min(ε, 700))``, which stated e^700 (about 10^304) for a record whose ε was larger,
    a stronger guarantee than the one it has.

    Args:
        epsilon: The ε of the bound (``inf`` allowed).

    Returns:
        e^ε, or ``inf``.

    Example:
        >>> odds_factor(0.0), odds_factor(1000.0)
        (1.0, inf)
    """
    e = float(epsilon)
    return math.exp(e) if e <= 709.0 else math.inf


def _dp_risk(losses: pl.DataFrame, delta: float | None) -> dict[str, Any]:
    """Per-record losses in numbers: quantiles of ρ and ε(δ), and the posterior-odds bound."""
    out: dict[str, Any] = {"records": losses.height, "delta": delta}
    for col in ("rho", "epsilon_delta"):
        if col not in losses.columns or losses.height == 0:
            continue
        v = losses[col].to_numpy().astype(np.float64)
        v = v[np.isfinite(v)]
        if not v.size:
            continue
        out[col] = {q: float(np.quantile(v, p)) for q, p in
                    (("median", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))}
        if col == "epsilon_delta":
            out["posterior_odds_factor"] = {k: odds_factor(e) for k, e in out[col].items()}
            out["share_epsilon_at_most"] = {str(t): float((v <= t).mean())
                                            for t in (1.0, 3.0, 10.0)}
    return out


def _sdc_risk(tables: list[dict[str, Any]]) -> dict[str, Any]:
    """Records whose contribution is pinned within the rule's protection."""
    per: list[dict[str, Any]] = []
    worst: list[dict[str, Any]] = []
    for x in tables:
        c = x["cells"]
        prim = c.filter(pl.col("status") == "U")
        aud = prim.filter(pl.col("audit_lower").is_not_null())
        bad = aud.filter(pl.col("protected") == False)  # noqa: E712
        width = (c["audit_upper"] - c["audit_lower"])
        top = max(float(c["value"].abs().max() or 1.0), 1.0)
        contributions = int(prim["freq"].sum())
        exact = c.filter((width <= TOL * pl.max_horizontal(pl.col("value").abs(), 1.0)
                          + LP_TOL * top) & pl.col("audit_lower").is_not_null())
        per.append({"table": x["table"], "measure": x["measure"], "method": x["sdc"].method,
                    "primary_cells": prim.height, "audited_primary": aud.height,
                    "under_protected_primary": bad.height,
                    "records_pinned": bad.height,
                    # contributors summed over the primary cells: a record (unit) in
                    # several primary cells is counted in each (not distinct records)
                    "contributions_to_primary_cells": contributions,
                    # deprecated (stop 67): the same number, under a name that said records
                    "records_in_primary_cells": contributions,
                    "withheld_cells_recovered_exactly": exact.height})
        if bad.height:
            b = bad.with_columns(
                ((pl.col("value") - pl.col("audit_lower")) / pl.col("lpl").clip(1e-300))
                .alias("lower_ratio"),
                ((pl.col("audit_upper") - pl.col("value")) / pl.col("upl").clip(1e-300))
                .alias("upper_ratio"))
            b = b.with_columns(pl.min_horizontal("lower_ratio", "upper_ratio").alias("ratio"))
            for r in b.sort("ratio").head(10).iter_rows(named=True):
                worst.append({"table": x["table"], "measure": x["measure"],
                              "cell": r["cell_key"], "contributors": r["freq"],
                              "value": r["value"], "largest": r["x1"],
                              "interval": [r["audit_lower"], r["audit_upper"]],
                              "required_below": r["lpl"], "required_above": r["upl"],
                              "achieved_share_of_required": r["ratio"]})
    worst.sort(key=lambda w: w["achieved_share_of_required"])
    return {"tables": per, "worst": worst[:20],
            "records_pinned": int(sum(p["records_pinned"] for p in per))}


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        f = float(x)
        return f if math.isfinite(f) else (None if math.isnan(f) else str(f))
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


# -- planning --------------------------------------------------------------------------------

def compare_plan(spec: Any) -> dict[str, Any]:
    """The DP side of a comparison from public inputs only (no data read).

    For each table: the smallest cell total expected to be published without a reliability
    flag (flagged with probability below one half), and the expected standard deviation and
    coefficient of variation at the plan's cell totals; over the release: the
    planned per-record loss at the plan's record sizes and the posterior-odds factor it bounds.
    The traditional side needs the data (which cells are sensitive) and is left to
    ``tabdp compare``.

    Args:
        spec: A validated `ReleaseSpec`.

    Returns:
        A JSON-ready dict.

    Example:
        >>> import pathlib, tabdp
        >>> from tabdp.release.spec import load_spec
        >>> root = pathlib.Path(tabdp.__file__).parents[1]
        >>> p = compare_plan(load_spec(root / "examples" / "cbp_release.toml"))
        >>> sorted(p)
        ['loss', 'tables', 'traditional']
    """
    from tabdp.release.runner import plan_summary

    s = plan_summary(spec)
    tables = []
    for t in s["tables"]:
        cv_flag = t["publication"]["cv_flag"]
        err: dict[str, Any] = {}
        for m, rows in t["expected_error"].items():
            err[m] = [{"total": r["total"], "sd": r.get("sd"),
                       "cv": (r["sd"] / r["total"] if r.get("sd") is not None and r["total"] > 0
                              else None)} for r in rows]
        fc = t.get("forecast") or []
        usable = [r["total"] for r in fc if _finite(r.get("p_flagged")) is not None
                  and r["p_flagged"] < 0.5]
        tables.append({"table": t["name"], "kind": t["kind"], "by": t["by"],
                       "cells": t["cells"], "cv_flag": cv_flag,
                       "smallest_usable_total": min(usable, default=None),
                       "forecast": fc, "expected_error": err})
    loss = [{"size": r["delta"], "rho": r.get("rho"), "epsilon_delta": r.get("epsilon_delta"),
             "posterior_odds_factor": (odds_factor(r["epsilon_delta"])
                                       if _finite(r.get("epsilon_delta")) is not None
                                       else None)}
            for r in s["total_policy_curve"]]
    return {"tables": tables, "loss": loss,
            "traditional": "needs the data (which cells are sensitive): run tabdp compare"}


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
