"""Releases planned together (``planned_releases`` / ``execute_planned``), as ``tabdp run`` does.

A batch checks every release before any data is read, then executes the releases in order.
Everything a batch gives must be what the same releases give one by one: tables (the same noise
for one seed), per-record losses to the last bit, confidential counts and cell audits,
admissions under every kind of budget.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from _engines import mixed_rows, replay_batch_sizes

import tabdp
from tabdp import mechanisms as mech
from tabdp.exceptions import ColumnNotFoundError, InvalidParameterError
from tabdp.frame._release import execute_planned, planned_releases
from tabdp.privacy.budget import Budget

KEYS = tabdp.KeySet.from_dict(c=["a", "b", "c"], s=[0, 1, 2])
SOME = tabdp.KeySet.from_frame(pl.DataFrame({"c": ["a", "b", "z"], "s": [0, 2, 1]}))


def _requests() -> list[dict[str, Any]]:
    return [
        dict(kind="sum", measures=["x", "y"], by=["c", "s"], keys=KEYS, name="xy",
             mechanism=mech.LogTransform(sigma=0.25, offset=1.0), nulls="zero",
             negatives="zero"),
        dict(kind="count", by=["c", "s"], keys=KEYS, mechanism=mech.Gaussian(3.0), name="n"),
        dict(kind="sum", measures=["w", "y"], by="c", keys=tabdp.KeySet.from_dict(c=["a", "c"]),
             mechanism=mech.VectorSubbotin(r=2.0, scale=80.0), negatives="drop", name="joint"),
        dict(kind="sum", measures="w", by=["c", "s"], keys=SOME, name="w",
             mechanism=mech.Subbotin(r=1.5, scale=20.0, delta=1e-9)),
        dict(kind="count", by="s", keys=tabdp.KeySet.from_dict(s=[0, 1, 5]), name="n_s"),
    ]


def _one_by_one(frame: Any, s: tabdp.Session) -> list[Any]:
    outs = []
    for req in _requests():
        args = {k: v for k, v in req.items() if k not in ("kind", "measures")}
        outs.append(frame.dp.sum(req["measures"], session=s, **args) if req["kind"] == "sum"
                    else frame.dp.count(session=s, **args))
    return outs


def _state(s: tabdp.Session) -> dict[str, Any]:
    rep = s.report(delta=1e-9)
    summary = rep.confidential_summary()
    return {"per_record": rep.per_record, "queries": summary["queries"],
            "summary": {k: v for k, v in summary.items() if k != "queries"},
            "cells": [r.cells for r in s.records]}


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "in-memory"])
@pytest.mark.parametrize("budget", [None, 0.5, {1e2: 0.3, 1e4: 0.8},
                                    Budget({1e2: 0.3, 1e4: 0.8}, total=0.9)],
                         ids=["none", "constant", "curve", "curve-total"])
def test_a_batch_equals_the_releases_one_by_one(tmp_path: Path, streaming: bool,
                                                budget: Any) -> None:
    """Same tables, noise, per-record losses, counts and audits, after earlier releases too."""
    path = tmp_path / "d.parquet"
    mixed_rows(4000, 3).write_parquet(path, row_group_size=700)
    results = []
    for batched in (False, True):
        s = tabdp.Session(seed=11, budget=budget, streaming=streaming, track_cells=True)
        lf = pl.scan_parquet(path)
        first = lf.dp.count(by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]), session=s,
                            name="before")  # the batch replays an earlier release
        outs = (execute_planned(planned_releases(lf, s, _requests())) if batched
                else _one_by_one(lf, s))
        results.append(([first, *outs], _state(s)))
    (t0, a), (t1, b) = results
    for x, y in zip(t0, t1, strict=True):
        assert x.equals(y)
    assert a["per_record"].equals(b["per_record"])
    assert a["queries"] == b["queries"]
    assert a["summary"] == b["summary"]
    for x, y in zip(a["cells"], b["cells"], strict=True):
        assert (x is None and y is None) or x.equals(y)
    if budget is not None:  # the filter left records out (the test exercises it)
        assert any(q["units_left_out_by_budget"] for q in b["queries"][1:])


def _streaming_equals_memory(path: Path, reqs: list[dict[str, Any]], **session: Any
                             ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The batch streamed and in memory: equal tables, per-record reports, queries and audits.

    Returns the two sessions' states (streaming first) for further checks.
    """
    results = []
    for streaming in (True, False):
        s = tabdp.Session(seed=3, streaming=streaming, track_cells=True, **session)
        outs = execute_planned(planned_releases(pl.scan_parquet(path), s, reqs))
        results.append((outs, _state(s)))
    (t0, a), (t1, b) = results
    for x, y in zip(t0, t1, strict=True):
        assert x.equals(y)
    assert a["per_record"].equals(b["per_record"])
    assert a["queries"] == b["queries"]
    for x, y in zip(a["cells"], b["cells"], strict=True):
        assert (x is None and y is None) or x.equals(y)
    return a, b


def test_a_streaming_batch_keeps_no_per_row_state(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch replays the budget filter batch by batch, never on the whole input, in one pass.

    Every release of the batch is aggregated in the same pass over the input: each row goes
    through the replaying batch function once for the whole batch.
    """
    path = tmp_path / "d.parquet"
    mixed_rows(60_000, 4).write_parquet(path, row_group_size=10_000)
    rows = replay_batch_sizes(monkeypatch)
    s = tabdp.Session(seed=1, streaming=True, budget=1.0)
    execute_planned(planned_releases(pl.scan_parquet(path), s, _requests()))
    assert sum(rows) == 60_000  # every row once, for the five releases together
    assert max(rows) < 60_000
    assert [r.name for r in s.records] == ["xy", "n", "joint", "w", "n_s"]


def test_every_release_is_checked_before_any_data_is_read() -> None:
    """A bad release anywhere in the batch: refused, nothing read, nothing recorded."""
    s = tabdp.Session(seed=1, streaming=True, budget=1.0)
    def boom(d: pl.DataFrame) -> pl.DataFrame:
        raise AssertionError("data read")

    lf = pl.LazyFrame({"c": ["a"], "s": [0], "x": [1.0], "y": [1.0], "w": [1.0]}).map_batches(
        boom, validate_output_schema=False)
    bad = [*_requests(), dict(kind="sum", measures="nope", by="c", keys=KEYS.project(["c"]),
                              mechanism=mech.Gaussian(1.0))]
    with pytest.raises(ColumnNotFoundError, match="'nope'"):
        planned_releases(lf, s, bad)
    twice = [*_requests(), dict(kind="count", by="c", keys=KEYS.project(["c"]), name="n")]
    with pytest.raises(InvalidParameterError, match="'n' is used twice"):
        planned_releases(lf, s, twice)
    assert not s.records
    default = planned_releases(lf, s, [dict(kind="count", by="c", keys=KEYS.project(["c"]))] * 2)
    assert [r.op.name for r in default] == ["q1_count", "q2_count"]


def test_a_failed_check_stops_the_batch_there() -> None:
    """A strict rule failing on release 2: release 1 is recorded, as one by one."""
    df = pl.DataFrame({"c": ["a", "b"], "s": [0, 1], "x": [1.0, None]})
    for batched in (False, True):
        s = tabdp.Session(seed=1, streaming=True)
        reqs = [dict(kind="count", by="c", keys=KEYS.project(["c"]), name="n"),
                dict(kind="sum", measures="x", by="c", keys=KEYS.project(["c"]), name="x",
                     mechanism=mech.Gaussian(1.0))]
        with pytest.raises(tabdp.exceptions.DataValidationError):
            if batched:
                execute_planned(planned_releases(df.lazy(), s, reqs))
            else:
                df.lazy().dp.count(by="c", keys=KEYS.project(["c"]), name="n", session=s)
                df.lazy().dp.sum("x", by="c", keys=KEYS.project(["c"]), name="x", session=s,
                                 mechanism=mech.Gaussian(1.0))
        assert [r.name for r in s.records] == ["n"]


def test_a_batch_needs_one_session_and_one_input() -> None:
    s = tabdp.Session(seed=1, streaming=True)
    one = planned_releases(pl.LazyFrame({"c": ["a"]}), s, [dict(kind="count", by="c",
                                                              keys=KEYS.project(["c"]))])
    two = planned_releases(pl.LazyFrame({"c": ["b"]}), s, [dict(kind="count", by="c",
                                                              keys=KEYS.project(["c"]),
                                                              name="other")])
    with pytest.raises(InvalidParameterError, match="one session and one input"):
        execute_planned([*one, *two])
    with pytest.raises(InvalidParameterError, match="need a session"):
        planned_releases(pl.LazyFrame({"c": ["a"]}), None, [])  # type: ignore[arg-type]


@pytest.mark.parametrize("delta", [None, 1e-9], ids=["no-delta", "delta"])
@pytest.mark.parametrize("budget", [None, 0.5, {1e2: 0.3, 1e4: 0.8},
                                    Budget({1e2: 0.3, 1e4: 0.8}, total=0.9)],
                         ids=["none", "constant", "curve", "curve-total"])
def test_a_batch_writes_its_report_in_its_own_pass(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   budget: Any, delta: float | None) -> None:
    """The report file of a streaming batch comes from the batch's pass: no replay, same bytes.

    The batch's one replay gives the admission flags and every record's running totals; the
    report written afterwards reads those (no row goes through the replay again) and is the
    replayed report's file byte for byte, under every kind of budget, with and without δ.
    """
    path = tmp_path / "d.parquet"
    mixed_rows(4000, 3).write_parquet(path, row_group_size=700)
    s = tabdp.Session(seed=11, budget=budget, streaming=True, track_cells=True)
    lf = pl.scan_parquet(path)
    lf.dp.count(by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]), session=s, name="before")
    execute_planned(planned_releases(lf, s, _requests()))
    folder = Path(s.ledger.spill.folder)
    assert folder.is_dir()
    rows = replay_batch_sizes(monkeypatch)
    s.report(delta=delta).write_per_record(tmp_path / "spilled.parquet")
    assert rows == []  # written from the batch's pass
    assert not folder.exists() and s.ledger.spill is None  # its files removed once used
    s.report(delta=delta).write_per_record(tmp_path / "replayed.parquet")
    assert sum(rows) == 4000  # the report replayed, as before
    spilled = (tmp_path / "spilled.parquet").read_bytes()
    assert spilled == (tmp_path / "replayed.parquet").read_bytes()
    assert pl.read_parquet(tmp_path / "spilled.parquet").equals(
        s.report(delta=delta).per_record)
    if budget is not None:  # the filter left records out (the test exercises it)
        assert any(q["units_left_out_by_budget"]
                   for q in s.report().confidential_summary()["queries"][1:])


def test_a_batch_report_after_a_median_is_replayed(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A median after the batch (its pass writes no report rows): the report is replayed."""
    path = tmp_path / "d.parquet"
    mixed_rows(3000, 2).write_parquet(path, row_group_size=500)
    s = tabdp.Session(seed=3, budget=0.5, streaming=True)
    lf = pl.scan_parquet(path)
    execute_planned(planned_releases(lf, s, _requests()))
    folder = Path(s.ledger.spill.folder)
    lf.dp.median("x", by="c", keys=KEYS.project(["c"]), bounds=(0, 10), epsilon=1.0,
                 nulls="drop", session=s, name="after")
    rows = replay_batch_sizes(monkeypatch)
    s.report().write_per_record(tmp_path / "r.parquet")
    assert sum(rows) == 3000
    assert not folder.exists()
    got = pl.read_parquet(tmp_path / "r.parquet")
    assert got.columns[-1] == "rho_after"
    assert got.equals(s.report().per_record)


@pytest.mark.parametrize("declared", [False, True], ids=["undeclared", "declared"])
def test_a_batch_report_is_refused_when_the_input_changed(tmp_path: Path,
                                                          declared: bool) -> None:
    """The input rewritten after the batch: the report is refused, as a replayed one is.

    A report declared before the releases (`ReplayLedger.expect_report`) too.
    """
    path = tmp_path / "d.parquet"
    data = mixed_rows(2000, 2)
    data.write_parquet(path, row_group_size=500)
    s = tabdp.Session(seed=3, budget=0.5, streaming=True)
    if declared:
        s.ledger.expect_report(1e-9)
    execute_planned(planned_releases(pl.scan_parquet(path), s, _requests()))
    assert s.ledger.spill is not None
    data.with_columns(pl.col("x") + 1).write_parquet(path, row_group_size=500)
    s.ledger.source = pl.scan_parquet(path)  # as a re-created scan of the rewritten file
    s.ledger.spill.source = s.ledger.source
    with pytest.raises(InvalidParameterError, match="no longer holds the rows"):
        s.report(delta=1e-9 if declared else None).write_per_record(tmp_path / "r.parquet")
    assert not (tmp_path / "r.parquet").exists()


@pytest.mark.parametrize("track", [False, True], ids=["no-audit", "audit"])
@pytest.mark.parametrize("budget", [None, {1e2: 0.3, 1e4: 0.8}], ids=["none", "curve"])
def test_releases_one_by_one_write_the_report_in_the_last_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: Any, track: bool) -> None:
    """Releases one by one: the last one's pass writes the report rows (all releases' losses).

    Without a budget or cell audit a release's pass replays nothing, and the report replays.
    """
    path = tmp_path / "d.parquet"
    mixed_rows(3000, 2).write_parquet(path, row_group_size=400)
    s = tabdp.Session(seed=5, budget=budget, streaming=True, track_cells=track)
    _one_by_one(pl.scan_parquet(path), s)
    spilled = budget is not None or track
    assert (s.ledger.spill is not None) == spilled
    rows = replay_batch_sizes(monkeypatch)
    s.report(delta=1e-9).write_per_record(tmp_path / "a.parquet")
    assert sum(rows) == (0 if spilled else 3000)
    s.report(delta=1e-9).write_per_record(tmp_path / "b.parquet")
    assert sum(rows) == (3000 if spilled else 6000)  # the second one replayed
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert pl.read_parquet(tmp_path / "a.parquet").columns[-5:] == [
        f"rho_{r['name']}" for r in _requests()]


# origin: review R18 (R18-7: a spill file that could not be written failed the release)
@pytest.mark.parametrize("what", ["write", "folder"])
def test_a_spill_that_cannot_be_written_does_not_fail_the_release(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str) -> None:
    """The report's temporary files are an optimisation: a failed write changes no release.

    With the temporary folder full (every IPC write refused) or missing (no folder made), the
    release gives the same table and losses as one that wrote them, and the report is replayed
    from the input.
    """
    path = tmp_path / "d.parquet"
    mixed_rows(2000, 2).write_parquet(path, row_group_size=500)

    def run(full: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
        s = tabdp.Session(seed=3, budget=0.5, streaming=True)
        with monkeypatch.context() as m:
            if full:
                def refuse(*a: Any, **k: Any) -> None:
                    raise OSError(28, "No space left on device")

                if what == "write":
                    m.setattr(pl.DataFrame, "write_ipc", refuse)
                else:
                    m.setattr("tempfile.mkdtemp", refuse)
            out = pl.scan_parquet(path).dp.count(by="c", keys=KEYS.project(["c"]), session=s,
                                                 mechanism=mech.Gaussian(3.0))
        s.report().write_per_record(tmp_path / f"{full}.parquet")
        return out, pl.read_parquet(tmp_path / f"{full}.parquet")

    assert run(True)[0].equals(run(False)[0])
    assert (tmp_path / "True.parquet").read_bytes() == (tmp_path / "False.parquet").read_bytes()


# origin: review R18 (N2: a killed process's spill folder stayed in the temporary directory)
def test_stale_spill_folders_of_dead_processes_are_swept(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first spill of a process removes the spill folders that killed processes left.

    Only folders named ``tabdp-report-<pid>-*``, owned by this user, not links, whose process
    is gone; a live process's folder (this one's, pid 1's), a link and a plain file stay.
    """
    import os
    import subprocess
    import sys

    from tabdp.frame import _stream

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    dead = proc.pid
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    stale = tmp / f"tabdp-report-{dead}-abc"
    stale.mkdir(mode=0o700)
    (stale / "00000000000000000000.arrow").write_bytes(b"losses")
    mine = tmp / f"tabdp-report-{os.getpid()}-x"
    mine.mkdir()
    init = tmp / "tabdp-report-1-x"
    init.mkdir()
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_bytes(b"k")
    (tmp / f"tabdp-report-{dead}-link").symlink_to(target, target_is_directory=True)
    (tmp / f"tabdp-report-{dead}-file").write_bytes(b"f")
    other = tmp / "tabdp-report-notapid"
    other.mkdir()

    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    monkeypatch.setattr(_stream, "_swept", False)
    spill = _stream._Spill()
    try:
        assert not stale.exists()
        assert mine.exists() and init.exists() and other.exists()
        assert (target / "keep").exists() and (tmp / f"tabdp-report-{dead}-file").exists()
        assert Path(spill.folder).name.startswith(f"tabdp-report-{os.getpid()}-")
        assert Path(spill.folder).parent == tmp
        # once per process: a later stale folder waits for the next process
        stale.mkdir()
        _stream._Spill().close()
        assert stale.exists()
        assert _stream._sweep_stale_spills(str(tmp)) == 1 and not stale.exists()
    finally:
        spill.close()


def test_a_column_released_twice_is_charged_once_per_batch_with_the_same_losses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two releases of ``x`` by equal mechanisms (other cells) and a count over the same cells.

    The streaming batch computes the equal charges once per batch (`_same_charges`) and
    aggregates the releases over the same cells in one group-by (`release_queries`); the
    tables, per-record losses, counts and cell audits are the in-memory engine's, with a curve
    budget that leaves records out.
    """
    import tabdp.frame._stream as st

    path = tmp_path / "d.parquet"
    mixed_rows(3000, 5).write_parquet(path, row_group_size=500)
    # every row in a cell of both groupings (the charges are shared where the same rows are)
    cells = tabdp.KeySet.from_dict(c=["a", "b", "c", "d"], s=[0, 1, 2, 3])
    reqs = [dict(kind="sum", measures=["x"], by=["c", "s"], keys=cells, name="x_cs",
                 mechanism=mech.ExpPolyLog(sigma=5.0, a=1.0, d=3.5), nulls="zero"),
            dict(kind="count", by=["c", "s"], keys=cells, name="n_cs",
                 mechanism=mech.Gaussian(3.0)),
            dict(kind="sum", measures=["x"], by=["s"], keys=tabdp.KeySet.from_dict(s=[0, 1, 2, 3]),
                 name="x_s", mechanism=mech.ExpPolyLog(sigma=5.0, a=1.0, d=3.5), nulls="zero")]
    calls: list[int] = []
    charges = st._charges

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return charges(*args, **kwargs)

    monkeypatch.setattr(st, "_charges", counted)
    sizes = replay_batch_sizes(monkeypatch)
    _, b = _streaming_equals_memory(path, reqs, budget={1.0: 0.2, 1e3: 1.2})
    assert any(q["units_left_out_by_budget"] for q in b["queries"])
    # the batch's pass: two programs charged per batch, not three
    assert sizes and len(calls) == 2 * len(sizes)


@pytest.mark.parametrize("by", ["s", "c"])
def test_key_sets_equal_by_value_but_not_dtype_keep_their_own_cell_audit(
        tmp_path: Path, by: str) -> None:
    """Review r19: a pass shares a group-by only between key sets of the same dtypes.

    ``KeySet.__eq__`` reads values (Int64 and Int32 keys, String and Categorical keys are
    equal); a release whose key dtypes differ from the data's groups by its keys, and its cell
    audit reads them. Before the fix the second release shared the first's group-by (cells
    alone: no keys inside the key set) and its audit's keys were null. Tables, losses, counts
    and audits are the in-memory engine's.
    """
    path = tmp_path / "d.parquet"
    mixed_rows(2000, 5).write_parquet(path, row_group_size=500)
    values: Any = [0, 1, 2, 3] if by == "s" else ["a", "b", "c", "d"]
    other = pl.Int32 if by == "s" else pl.Categorical
    same = tabdp.KeySet.from_dict(**{by: values})
    cast = tabdp.KeySet.from_dict(**{by: pl.Series(values, dtype=other)})
    assert same == cast
    reqs = [dict(kind="sum", measures=["x"], by=[by], keys=same, name="x_by",
                 mechanism=mech.Gaussian(5.0), nulls="zero"),
            dict(kind="count", by=[by], keys=cast, name="n_by", mechanism=mech.Gaussian(3.0))]
    a, b = _streaming_equals_memory(path, reqs, budget=5.0)
    assert a["cells"][1] is not None and b["cells"][1] is not None
    assert a["cells"][1][by].null_count() == 0


@pytest.mark.parametrize("budget", [None, 5.0], ids=["no-budget", "budget"])
def test_every_query_of_a_pass_checks_the_rows_it_read(tmp_path: Path,
                                                       budget: float | None) -> None:
    """Review r19: an input whose rows differ between evaluations is refused in a batch.

    Without a replay, the releases of a pass over other cells are other queries, and Polars
    evaluates an unseeded shuffle once per query (each query reads other rows). The charges
    follow row positions, so a query that read other rows than the bound ones must be
    refused, as before h83 (which fingerprinted the first query only and released the batch).
    With a budget the pass is one query (the later set is aggregated in its batch function):
    every release is computed from its one evaluation, and the report, which reads the input
    again, is the refusal.
    """
    path = tmp_path / "d.parquet"
    mixed_rows(3000, 5).write_parquet(path, row_group_size=500)
    lf = pl.scan_parquet(path).select("c", "s", "x").with_columns(pl.col("x").shuffle())
    reqs = [dict(kind="sum", measures=["x"], by=["s"], keys=tabdp.KeySet.from_dict(s=[0, 1, 2, 3]),
                 name="x_s", mechanism=mech.Gaussian(5.0), nulls="zero"),
            dict(kind="sum", measures=["x"], by=["c"],
                 keys=tabdp.KeySet.from_dict(c=["a", "b", "c", "d"]), name="x_c",
                 mechanism=mech.Gaussian(5.0), nulls="zero")]
    s = tabdp.Session(seed=3, budget=budget, streaming=True)
    if budget is not None:
        execute_planned(planned_releases(lf, s, reqs))
        assert [r.name for r in s.records] == ["x_s", "x_c"]
        with pytest.raises(InvalidParameterError, match="no longer holds the rows"):
            s.report(delta=1e-9).per_record  # noqa: B018
        return
    with pytest.raises(InvalidParameterError, match="not the rows its earlier releases read"):
        execute_planned(planned_releases(lf, s, reqs))


def _group_bys_per_collect(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record, for every ``pl.collect_all`` of a streaming pass, how many queries it runs."""
    import tabdp.frame.backends.polars as backend

    calls: list[int] = []
    real = backend.pl.collect_all

    def spy(queries: Any, **kwargs: Any) -> Any:
        calls.append(len(queries))
        return real(queries, **kwargs)

    monkeypatch.setattr(backend.pl, "collect_all", spy)
    return calls


@pytest.mark.parametrize("compact", [2, 32], ids=["added-up-every-2-batches", "at-the-end"])
@pytest.mark.parametrize("budget", [5.0, {1e2: 0.3, 1e4: 0.8}], ids=["constant", "curve"])
def test_a_pass_over_several_sets_of_cells_runs_one_group_by_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: Any, compact: int) -> None:
    """Several sets of cells: the pass's group-by aggregates one; the batch function the others.

    Polars' streaming engine runs one group-by at a time, so a pass with a group-by per set of
    cells held every row of the shared plan for the later ones (2.4 GB at 10M rows of the
    example spec, growing with the rows). Then each later set had a pass of its own over the
    input and the spilled flags. Now the one pass runs one group-by, the filter is replayed
    once (each row through the batch function once), the later sets are aggregated there
    (`InBatch`), and tables, noise, per-record losses, counts (rows and keys outside the key
    sets, rows left out) and cell audits are still the in-memory engine's.
    """
    from tabdp.frame._stream import InBatch

    monkeypatch.setattr(InBatch, "_COMPACT", compact)  # the batches' groups added up as held
    path = tmp_path / "d.parquet"
    mixed_rows(6000, 8).write_parquet(path, row_group_size=500)
    calls = _group_bys_per_collect(monkeypatch)
    rows = replay_batch_sizes(monkeypatch)
    held: list[int] = []  # after each batch, the most groups' frames held for one set
    real_add = InBatch._add  # a batch's group-by (on the pass's side-work thread)

    def add(self: Any, frame: Any) -> None:
        real_add(self, frame)
        held.append(max(len(p) for p in self._parts))

    monkeypatch.setattr(InBatch, "_add", add)
    s = tabdp.Session(seed=1, streaming=True, budget=budget, track_cells=True)
    execute_planned(planned_releases(pl.scan_parquet(path), s, _requests()))
    assert sum(rows) == 6000  # one replay, every set aggregated in it
    assert calls == [1]  # one collect, one query: four sets of cells
    assert len(held) == len(rows) and max(held) == min(compact - 1, len(rows))  # bounded
    a, _ = _streaming_equals_memory(path, _requests(), budget=budget)
    assert any(q["units_left_out_by_budget"] for q in a["queries"][1:])
    assert any(q["cells_with_data_outside_keys"] for q in a["queries"][1:])


def test_batches_inside_the_key_sets_are_grouped_by_cell_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch with no row outside a later set's key set is grouped by its cell alone.

    Rows sorted by their keys: some batches hold rows outside a later set's key set (grouped
    by cell and keys), others none (grouped by cell, the key columns null); the batches' groups
    of both kinds are added up together, and the tables, per-record losses, counts (keys
    outside the key sets) and cell audits are still the in-memory engine's.
    """
    from tabdp.frame._stream import InBatch

    monkeypatch.setattr(InBatch, "_COMPACT", 3)  # both kinds added up in one frame, often
    path = tmp_path / "d.parquet"
    mixed_rows(6000, 8).sort("c", "s").write_parquet(path, row_group_size=500)
    kinds: list[bool] = []  # per batch and later set: grouped by its cell alone?
    real = pl.DataFrame.group_by

    def spy(self: pl.DataFrame, *by: Any, **kw: Any) -> Any:
        if by and isinstance(by[0], str) and by[0].startswith("__tabdp_c") and (
                any(c.startswith("__tabdp_ok") for c in self.columns)):
            kinds.append(len(by) == 1)
        return real(self, *by, **kw)

    monkeypatch.setattr(pl.DataFrame, "group_by", spy)
    a, _ = _streaming_equals_memory(path, _requests())
    assert True in kinds and False in kinds
    assert any(q["cells_with_data_outside_keys"] for q in a["queries"][1:])


@pytest.mark.parametrize("measure", ["pay__tabdp_worst_rho", "pay__tabdp_worst_size"])
def test_a_measure_named_like_a_cell_audit_is_summed_over_the_batches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, measure: str) -> None:
    """Review r64: the batches' groups of a later set are summed, but for the audits' maxima.

    `InBatch` took as a maximum every column whose name ended like a cell audit's, and a
    measure's columns (its total, what was left out, its counters) end with the measure's own
    name: a measure named ``pay__tabdp_worst_rho`` (only the start of a name is reserved) was
    released as the largest batch's sum, not the total. The maxima are now named in full.
    """
    from tabdp.frame._stream import InBatch

    monkeypatch.setattr(InBatch, "_COMPACT", 2)
    path = tmp_path / "d.parquet"
    mixed_rows(3000, 6).rename({"w": measure}).write_parquet(path, row_group_size=300)
    reqs = [dict(kind="count", by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]), name="n_c",
                 mechanism=mech.Gaussian(3.0)),
            dict(kind="sum", measures=measure, by="s", keys=tabdp.KeySet.from_dict(s=[0, 1]),
                 name="w_s", mechanism=mech.Gaussian(3.0))]
    added = []
    real = InBatch.add
    monkeypatch.setattr(InBatch, "add", lambda self, frame: (added.append(1), real(self, frame)))
    _streaming_equals_memory(path, reqs, budget=5.0)
    assert len(added) > 2  # the later set was aggregated in the batch function, added up


@pytest.mark.parametrize("ids", ["decreasing", "with-gaps", "interleaved", "unwritten"])
def test_the_later_sets_are_aggregated_in_the_batch_whatever_the_row_ids(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ids: str) -> None:
    """The later sets of cells need neither the spill nor ordered row ids.

    Row ids given with the input (as the release workflow numbers its rows): decreasing,
    increasing with gaps (rows filtered after numbering), interleaved (each batch's ids from
    two far apart ranges), or a batch of the spill not written: the later sets' releases are
    aggregated in the one replay from each batch's own rows and flags (their spilled flags,
    read back by row id, needed a pass of their own per set, and a replay of each where the
    ids could not be told apart). The results are the in-memory engine's (whose report lists
    every id up to the largest, those of no row with no loss).
    """
    from tabdp.frame import _stream
    from tabdp.frame._stream import ROW_ID

    path = tmp_path / "d.parquet"
    frame = mixed_rows(5000, 9)
    if ids == "decreasing":
        frame = frame.with_columns(pl.int_range(5000, 0, -1, dtype=pl.Int64).alias(ROW_ID))
    elif ids == "interleaved":
        i = pl.int_range(0, 5000, dtype=pl.Int64)
        frame = frame.with_columns(((i % 2) * 1_000_000 + i // 2).alias(ROW_ID))
    else:
        frame = (frame.with_row_index(ROW_ID).filter(pl.col(ROW_ID) % 7 != 3)
                 .with_columns(pl.col(ROW_ID).cast(pl.Int64)))
    frame.write_parquet(path, row_group_size=800)
    if ids == "unwritten":
        real = _stream._Spill.add
        written: list[int] = []

        def add(self: Any, ids_: Any, cols: Any) -> None:
            written.append(1)
            if len(written) == 3:  # the third batch's file cannot be written
                self.usable = False
                return
            real(self, ids_, cols)

        monkeypatch.setattr(_stream._Spill, "add", add)
    rows = replay_batch_sizes(monkeypatch)
    numbered = dict(unit=ROW_ID, _row_ids=True, budget=5.0)  # as `tabdp run` numbers rows
    s = tabdp.Session(seed=1, streaming=True, track_cells=True, **numbered)
    execute_planned(planned_releases(pl.scan_parquet(path), s, _requests()))
    assert sum(rows) == frame.height  # one replay for every set
    states = []
    for streaming in (True, False):
        s = tabdp.Session(seed=3, streaming=streaming, track_cells=True, **numbered)
        outs = execute_planned(planned_releases(pl.scan_parquet(path), s, _requests()))
        states.append((outs, _state(s)))
    (t0, a), (t1, b) = states
    assert all(x.equals(y) for x, y in zip(t0, t1, strict=True))
    assert a["queries"] == b["queries"]
    assert all((x is None and y is None) or x.equals(y)
               for x, y in zip(a["cells"], b["cells"], strict=True))
    assert a["per_record"].height == frame.height
    read = b["per_record"].join(frame.select(ROW_ID), on=ROW_ID, how="semi")
    assert a["per_record"].sort(ROW_ID).equals(read.sort(ROW_ID))
    assert any(q["units_left_out_by_budget"] for q in a["queries"])


def test_an_empty_input_gives_the_later_sets_passes_of_their_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No batch reached the batch function: each later set's release has its own pass.

    Its tables (every cell empty), counts and losses are those of the releases one by one.
    """
    lf = pl.LazyFrame({"c": ["a"], "s": [0], "x": [5.0]}).filter(pl.col("x") > 10.0)
    reqs = [dict(kind="count", by=["c"], keys=tabdp.KeySet.from_dict(c=["a", "b"]), name="n_c",
                 mechanism=mech.Gaussian(3.0)),
            dict(kind="count", by=["s"], keys=tabdp.KeySet.from_dict(s=[0, 1]), name="n_s",
                 mechanism=mech.Gaussian(3.0))]
    rows = replay_batch_sizes(monkeypatch)
    got = []
    for batched in (True, False):
        s = tabdp.Session(seed=1, streaming=True, budget=5.0, track_cells=True)
        if batched:
            outs = execute_planned(planned_releases(lf, s, reqs))
        else:
            outs = [lf.dp.count(session=s, **{k: v for k, v in r.items() if k != "kind"})
                    for r in reqs]
        got.append((outs, _state(s)))
    (t0, a), (t1, b) = got
    assert all(x.equals(y) for x, y in zip(t0, t1, strict=True))
    assert a["queries"] == b["queries"] and a["per_record"].equals(b["per_record"])
    assert sum(rows) == 0


def _changing_input(n: int, first: Any, later: Any) -> tuple[pl.LazyFrame, dict[str, int]]:
    """A plan over ``n`` rows whose column ``x`` changes between evaluations.

    ``x`` is ``first(x)`` on the first evaluation and ``later(x)`` on every later one.
    """
    import numpy as np

    seen = {"rows": 0}

    def f(s: pl.Series) -> pl.Series:
        v = s.to_numpy().copy()
        v = first(v) if seen["rows"] < n else later(v)
        seen["rows"] += len(s)
        return pl.Series(v)

    base = pl.DataFrame({"c": ["a", "b"] * (n // 2), "s": [0, 1, 2, 3] * (n // 4),
                         "x": np.ones(n)})
    return base.lazy().with_columns(pl.col("x").map_batches(f, return_dtype=pl.Float64)), seen


def test_every_set_of_a_pass_reads_one_evaluation_of_a_changing_input() -> None:
    """Review r33, now by construction: flags of one read are never applied to another's values.

    The input gives other values on later evaluations (a 10^6 value moves from row 0 to
    row 1). The pass evaluates it once: both sets of cells are aggregated from that read, so
    both releases leave the large value out (its record's loss passes the budget), and no
    later evaluation is combined with the flags (the later set had a pass of its own, checked
    against the first's rows, and the session refused it).
    """
    import tabdp.frame.backends.polars as backend
    from tabdp.frame._stream import ROW_ID

    def move(at: int) -> Any:
        def put(v: Any) -> Any:
            v[at] = 1e6
            return v
        return put

    lf, seen = _changing_input(1000, move(0), move(1))
    totals: dict[str, float] = {}
    real = backend.stream_aggregate

    def spy(rel: Any, grouped: Any, *args: Any, **kwargs: Any) -> Any:
        agg = real(rel, grouped, *args, **kwargs)
        totals[rel.op.name] = float(agg.full["x"].sum()) / 2**24
        return agg

    reqs = [dict(kind="sum", measures=["x"], by=["c"], name="x_c", mechanism=mech.Gaussian(10.0),
                 keys=tabdp.KeySet.from_dict(c=["a", "b"])),
            dict(kind="sum", measures=["x"], by=["s"], name="x_s", mechanism=mech.Gaussian(10.0),
                 keys=tabdp.KeySet.from_dict(s=[0, 1, 2, 3]))]
    s = tabdp.Session(seed=1, streaming=True, budget=1.0, unit=ROW_ID, _row_ids=True)
    mp = pytest.MonkeyPatch()
    mp.setattr(backend, "stream_aggregate", spy)
    try:
        execute_planned(planned_releases(lf.with_row_index(ROW_ID), s, reqs))
    finally:
        mp.undo()
    assert totals == {"x_c": 999.0, "x_s": 999.0}
    assert seen["rows"] == 1000  # one evaluation
    assert [r.name for r in s.records] == ["x_c", "x_s"]


def test_a_row_less_in_a_later_evaluation_changes_no_release_of_the_pass() -> None:
    """Review r33: an input that loses a row on later reads is read once by the pass.

    (The zipped first version raised Polars' ShapeError; the later set's own pass was then
    refused.) Both sets are aggregated from the one evaluation, of every row.
    """
    import numpy as np

    n, seen = 1000, {"rows": 0}

    def keep(s: pl.Series) -> pl.Series:
        m = np.ones(len(s), dtype=bool)
        if seen["rows"] >= n:
            m[0] = False
        seen["rows"] += len(s)
        return pl.Series(m)

    base = pl.DataFrame({"c": ["a", "b"] * (n // 2), "s": [0, 1, 2, 3] * (n // 4)})
    lf = base.lazy().filter(pl.col("c").map_batches(keep, return_dtype=pl.Boolean))
    reqs = [dict(kind="count", by=["c"], keys=tabdp.KeySet.from_dict(c=["a", "b"]), name="n_c",
                 mechanism=mech.Gaussian(3.0)),
            dict(kind="count", by=["s"], keys=tabdp.KeySet.from_dict(s=[0, 1, 2]), name="n_s",
                 mechanism=mech.Gaussian(3.0))]
    s = tabdp.Session(seed=1, streaming=True, budget=5.0)
    execute_planned(planned_releases(lf, s, reqs))
    assert [r.name for r in s.records] == ["n_c", "n_s"]
    assert seen["rows"] == n  # one evaluation, of every row


@pytest.mark.parametrize("session", [dict(budget=5.0), dict(track_cells=True)],
                         ids=["budget", "audit"])
def test_no_row_and_one_row_are_released_alike(session: dict[str, Any]) -> None:
    """Review r33: neighbouring inputs (no row, one row) both release (no data-dependent error).

    With no row no spill batch is written; the first version then failed (an empty file list).
    """
    df = pl.DataFrame({"c": ["a"], "s": [0], "x": [5.0]})
    reqs = [dict(kind="count", by=["c"], keys=tabdp.KeySet.from_dict(c=["a", "b"]), name="n_c",
                 mechanism=mech.Gaussian(3.0)),
            dict(kind="count", by=["s"], keys=tabdp.KeySet.from_dict(s=[0, 1]), name="n_s",
                 mechanism=mech.Gaussian(3.0))]
    for threshold in (10.0, 1.0):  # no row, one row
        s = tabdp.Session(seed=1, streaming=True, **session)
        out = execute_planned(planned_releases(df.lazy().filter(pl.col("x") > threshold), s,
                                               reqs))
        assert [t.height for t in out] == [2, 2]


def test_a_batch_without_replay_collects_one_query_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No budget, no cell audit: each release's query is its own evaluation of the input.

    Collected together, Polars held every row of the shared plan for all group-bys but one
    (1.5 GB at 10M rows). Tables, noise, losses and counts are still the in-memory engine's.
    """
    path = tmp_path / "d.parquet"
    mixed_rows(6000, 12).write_parquet(path, row_group_size=1000)
    calls = _group_bys_per_collect(monkeypatch)
    s = tabdp.Session(seed=1, streaming=True)
    execute_planned(planned_releases(pl.scan_parquet(path), s, _requests()))
    assert calls == [1] * 5
    results = []
    for streaming in (True, False):
        s = tabdp.Session(seed=3, streaming=streaming)
        outs = execute_planned(planned_releases(pl.scan_parquet(path), s, _requests()))
        results.append((outs, _state(s)))
    (t0, a), (t1, b) = results
    assert all(x.equals(y) for x, y in zip(t0, t1, strict=True))
    assert a["per_record"].equals(b["per_record"])
    assert a["queries"] == b["queries"]


def test_running_out_of_memory_in_a_later_pass_is_not_called_a_changed_input() -> None:
    """Review r35: a failed pass of a bound session is a refusal, unless memory ran out.

    Once a streaming session has bound its rows, a pass that fails is refused as an input that
    no longer reads as its rows; running out of memory is raised as it is.
    """
    from tabdp.frame import _stream

    s = tabdp.Session(seed=1, streaming=True)
    lf = pl.DataFrame({"c": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]}).lazy()
    lf.dp.count(by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
                mechanism=mech.Gaussian(3.0), session=s)

    def fails(err: BaseException) -> Any:
        def read() -> Any:
            raise err
        return read

    with pytest.raises(MemoryError):
        _stream._read_input(s, fails(MemoryError()), report=False)
    with pytest.raises(InvalidParameterError, match="could not be read as the rows"):
        _stream._read_input(s, fails(pl.exceptions.ComputeError("x")), report=False)


def test_a_spill_restores_every_column_it_did_not_write_bit_for_bit() -> None:
    """`_Spill` keeps constants and copies out of its files and restores the same bits.

    Batches of different layouts (a column constant in one batch and not in the next, ``-0.0``
    against ``0.0``, ``inf``, NaN never taken as a constant, flags all set, none set or mixed,
    a column equal to another in one batch only, a batch too short to compact), read back by
    ``scan`` (every column, in row order) and ``read`` (chosen columns of one file).
    """
    import numpy as np

    from tabdp.frame._stream import ROW_ID, _Spill

    rng = np.random.default_rng(11)
    spill = _Spill()
    try:
        batches = []
        at = 0
        for i, n in enumerate([200, 300, 10, 250]):
            r = rng.random(n)
            cols = {
                "rho": r,
                "rho_z": r.copy() if i != 1 else r + 1.0,   # a copy of rho but in batch 1
                "zero": np.full(n, -0.0 if i == 0 else 0.0),  # -0.0: written
                "eps": np.full(n, np.inf) if i != 3 else rng.random(n),
                "nan": np.full(n, np.nan),
                "ok": np.full(n, i != 2) if i != 1 else rng.random(n) < 0.5,
                "dup": r.copy(),
            }
            spill.add(np.arange(at, at + n, dtype=np.int64), cols)
            batches.append(pl.DataFrame({ROW_ID: np.arange(at, at + n), **cols}))
            at += n
        spill.rows = at
        files = spill.files()
        assert files is not None
        written = [pl.read_ipc(f).columns for f in files]
        assert written[0] == [ROW_ID, "rho", "zero", "nan"]    # the rest: constants or copies
        assert "rho_z" in written[1] and "ok" in written[1]
        assert written[2] == [ROW_ID, *batches[2].columns[1:]]  # 10 rows: written as they are
        want = pl.concat(batches)
        got = spill.scan(files).collect()
        assert got.columns == want.columns
        assert got.schema == want.schema
        for c in want.columns:
            a, b = got[c].to_numpy(), want[c].to_numpy()
            assert a.tobytes() == b.tobytes(), c
        one = spill.scan(files[:1]).collect()
        assert one["zero"].to_numpy().tobytes() == np.full(200, -0.0).tobytes()
        assert one["dup"].to_numpy().tobytes() == batches[0]["rho"].to_numpy().tobytes()
        assert one["ok"].to_list() == [True] * 200
    finally:
        spill.close()


def test_a_spill_scans_files_whose_constants_differ_only_in_the_sign_of_zero_apart() -> None:
    """Review r37: layouts compared with ``==`` put a ``-0.0`` file with a ``0.0`` one."""
    import numpy as np

    from tabdp.frame._stream import ROW_ID, _Spill

    spill = _Spill()
    try:
        for at, z in ((0, 0.0), (100, -0.0)):
            spill.add(np.arange(at, at + 100, dtype=np.int64),
                      {"r": np.arange(100.0) + at, "z": np.full(100, z)})
        spill.rows = 200
        files = spill.files()
        assert files is not None
        got = spill.scan(files).collect()
        assert got[ROW_ID].to_list() == list(range(200))
        assert np.signbit(got["z"].to_numpy()).tolist() == [False] * 100 + [True] * 100
    finally:
        spill.close()


# -- the pass's side work on a thread of its own (`_Offload`) ----------------------------------

def test_the_side_work_thread_runs_tasks_off_the_caller_and_raises_their_error() -> None:
    import threading

    from tabdp.frame._stream import _Offload

    off = _Offload()
    where: list[str] = []
    off.submit(lambda: where.append(threading.current_thread().name))
    off.drain()
    assert where == ["tabdp-pass-side-work"]
    # LIMIT tasks waiting (the thread held by the first): the next one runs on the caller
    gate = threading.Event()
    off.submit(gate.wait)
    for _ in range(off.LIMIT - 1):
        off.submit(lambda: where.append("queued"))
    off.submit(lambda: where.append(threading.current_thread().name))
    assert where[-1] == threading.current_thread().name  # ran at once, here
    gate.set()
    off.drain()
    assert where.count("queued") == off.LIMIT - 1
    # a task's error is raised by drain, in the caller; the tasks after it are skipped
    off.submit(lambda: 1 / 0)
    off.submit(lambda: where.append("after the error"))
    with pytest.raises(ZeroDivisionError):
        off.drain()
    assert "after the error" not in where
    off.close()
    off.submit(lambda: where.append(threading.current_thread().name))  # closed: here
    assert where[-1] == threading.current_thread().name


def test_a_pass_whose_side_work_fails_raises_and_keeps_no_spill(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure on the side-work thread fails the pass as it would on the batch function's."""
    import tabdp.frame._stream as stream

    path = tmp_path / "d.parquet"
    mixed_rows(3000, 2).write_parquet(path, row_group_size=400)
    s = tabdp.Session(seed=3, budget=0.5, streaming=True, track_cells=True)

    def broken(self: Any, frame: pl.DataFrame) -> None:
        raise RuntimeError("side work failed")

    monkeypatch.setattr(stream.InBatch, "_add", broken)
    with pytest.raises(RuntimeError, match="side work failed"):
        execute_planned(planned_releases(pl.scan_parquet(path), s, _requests()))
    assert s.records == [] and s.ledger.spill is None


# -- a report declared before the releases (`ReplayLedger.expect_report`) ----------------------

@pytest.mark.parametrize("delta", [1e-9, None], ids=["delta", "no-delta"])
def test_a_declared_report_is_written_from_the_pass_as_the_replayed_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, delta: float | None) -> None:
    """The pass keeps the declared report's columns (ε at δ, not its components): the same file.

    The report at the declared δ reads the pass's files (no replay of the input); at another δ
    it is replayed, and the same as an undeclared session's.
    """
    path = tmp_path / "d.parquet"
    mixed_rows(3000, 2).write_parquet(path, row_group_size=400)
    got = {}
    for declared in (False, True):
        s = tabdp.Session(seed=7, budget={1e2: 0.3, 1e4: 0.8}, streaming=True,
                          track_cells=True)
        if declared:
            s.ledger.expect_report(delta)
        execute_planned(planned_releases(pl.scan_parquet(path), s, _requests()))
        spill = s.ledger.spill
        assert spill is not None and spill.declared == ((delta,) if declared else None)
        files = spill.files()
        assert files is not None
        stored = set(spill.scan(files).collect_schema().names())
        assert ("epsilon_delta" in stored) == (declared and delta is not None)
        assert ("rho_z" in stored) == (not declared)
        rows = replay_batch_sizes(monkeypatch)
        out = tmp_path / f"r{declared}.parquet"
        s.report(delta=delta).write_per_record(out, rename={"row": "row_id"})
        assert sum(rows) == 0  # read from the pass's files, not replayed
        got[declared] = pl.read_parquet(out)
    assert got[True].equals(got[False])
    # declared at one δ, asked at another: replayed from the input, the same losses
    other = 1e-6 if delta is None else None
    s = tabdp.Session(seed=7, budget={1e2: 0.3, 1e4: 0.8}, streaming=True, track_cells=True)
    s.ledger.expect_report(delta)
    execute_planned(planned_releases(pl.scan_parquet(path), s, _requests()))
    rows.clear()
    s.report(delta=other).write_per_record(tmp_path / "other.parquet")
    assert sum(rows) == 3000
    assert pl.read_parquet(tmp_path / "other.parquet").equals(
        s.report(delta=other).per_record)
    assert got[True].columns[:5] == ["row_id", "rho", "epsilon", "size",
                                     *(["epsilon_delta"] if delta else ["rho_xy"])]


@pytest.mark.parametrize("bad", [0.0, 1.0, -1e-9, float("nan"), 2.0, "1e-9"])
def test_a_declared_report_delta_is_checked_when_declared(tmp_path: Path, bad: Any) -> None:
    """A δ no report accepts is refused by `expect_report` itself (review r68).

    Not by the releases' pass, which computes ε at it: there it failed the release, from the
    data's first batch on, with a message about no δ the author gave that release.
    """
    from tabdp.privacy.ledger import ReplayLedger

    with pytest.raises(InvalidParameterError, match="expect_report"):
        ReplayLedger().expect_report(bad)
    s = tabdp.Session(seed=3, budget=0.5, streaming=True)
    with pytest.raises(InvalidParameterError, match="expect_report"):
        s.ledger.expect_report(bad)
    assert s.ledger.report_delta is None
    path = tmp_path / "d.parquet"
    mixed_rows(500, 2).write_parquet(path)
    execute_planned(planned_releases(pl.scan_parquet(path), s, _requests()))  # undeclared
    assert len(s.records) == len(_requests())


def test_a_declared_report_delta_is_kept_as_the_report_normalises_it() -> None:
    """A NumPy δ is kept as the float `tabdp.Report` compares it with (review r68)."""
    import numpy as np

    from tabdp.privacy.ledger import ReplayLedger

    led = ReplayLedger()
    led.expect_report(np.float32(1e-9))
    assert led.report_delta == (float(np.float32(1e-9)),)
    assert type(led.report_delta[0]) is float
    led.expect_report(None)
    assert led.report_delta == (None,)


def test_the_engines_threads_start_no_threads_of_their_own(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """A streaming pass's batch function (run by Polars on each of its threads) starts none.

    Summing two measures' losses over 100,000 rows of a batch started a thread pool per batch
    (`Charges.losses` over two currencies), and ε at δ over a long batch another: threads
    competing with the engine's own for the same cores. Inside the batch function (and on the
    pass's side-work thread) `tabdp._numeric.work_threads` is 1. The same call outside it
    still uses the engine's threads (the control: the counter can count).
    """
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    import tabdp._numeric as numeric
    import tabdp.privacy.ledger as led
    from tabdp._numeric import work_threads

    made: list[int] = []

    class Counting(ThreadPoolExecutor):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.append(1)
            super().__init__(*args, **kwargs)

    # every pool tabdp starts is made by `work_pool`
    monkeypatch.setattr(numeric, "ThreadPoolExecutor", Counting)
    monkeypatch.setattr(pl, "thread_pool_size", lambda: 2)  # (a 1-core runner has 1)
    n = 300_000
    rng = np.random.default_rng(0)
    df = pl.DataFrame({"c": rng.choice(["a", "b"], n), "x": rng.random(n) * 100.0,
                       "y": rng.random(n) * 10.0})
    s = tabdp.Session(seed=1, streaming=True, budget={1.0: 5.0, 1e3: 50.0})
    df.lazy().dp.sum(["x", "y"], by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
                     mechanism=mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0), session=s)
    s.report().write_per_record(tmp_path / "p.parquet")
    assert pl.read_parquet(tmp_path / "p.parquet").height == n
    assert made == []
    # the control: outside the engine's threads, the same sums use two threads
    assert work_threads() == 2
    ch = led.Charges(np.arange(n), {"x": np.ones(n), "y": np.ones(n)},
                     {"x": np.ones(n), "y": np.ones(n)}, {"x": np.ones(n), "y": np.ones(n)})
    ch.losses({"x": np.ones(n, bool), "y": np.ones(n, bool)})
    assert made == [1]


def test_the_engines_threads_run_with_numpys_errors_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch function's NumPy error state is the release's (`floats_quiet`), not Polars'.

    NumPy's error state is per thread, and Polars' threads keep NumPy's defaults (a warning per
    overflow or invalid operation): a value of one record that overflowed there would warn, a
    warning that depends on one record. The batch function runs with every category ignored,
    as the release's own thread does; a step that overflows (patched in) warns nothing.
    """
    import warnings

    import numpy as np

    import tabdp.frame._stream as stream

    real = stream.loss_components

    def overflowing(losses: Any) -> Any:
        _ = np.array([1e308]) * 10.0  # overflows: warns under NumPy's defaults
        return real(losses)

    monkeypatch.setattr(stream, "loss_components", overflowing)
    df = pl.DataFrame({"c": ["a", "b"] * 500, "x": [1.0] * 1000})
    s = tabdp.Session(seed=1, streaming=True, budget=50.0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        df.lazy().dp.sum("x", by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
                         mechanism=mech.Gaussian(2.0), session=s)
        df.lazy().dp.count(by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]), session=s)
        _ = s.report().per_record
    assert [str(w.message) for w in seen] == []
    with warnings.catch_warnings(record=True) as seen:  # the control: the step does warn
        warnings.simplefilter("always")
        _ = np.array([1e308]) * 10.0
    assert seen


def test_the_reports_eps_at_and_the_side_thread_run_with_numpys_errors_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ε at δ read from a spill (on Polars' threads) and the pass's side-work thread warn nothing.

    Both run on threads whose NumPy state is not the release's: each sets every category to
    ignore itself. A step that overflows there (patched in) warns nothing; the same step on
    this thread, under NumPy's defaults, does (the control).
    """
    import warnings

    import numpy as np

    import tabdp.frame._stream as stream

    def overflow() -> None:
        _ = np.array([1e308]) * 10.0

    real = stream.epsilon_at

    def overflowing(*args: Any) -> Any:
        overflow()
        return real(*args)

    monkeypatch.setattr(stream, "epsilon_at", overflowing)
    path = tmp_path / "d.parquet"
    mixed_rows(3000, 2).write_parquet(path, row_group_size=400)
    s = tabdp.Session(seed=7, budget={1e2: 0.3, 1e4: 0.8}, streaming=True)
    execute_planned(planned_releases(pl.scan_parquet(path), s, _requests()))
    assert s.ledger.spill is not None  # the report reads ε at δ from the pass's files
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        s.report(delta=1e-9).write_per_record(tmp_path / "r.parquet")
        off = stream._Offload()
        off.submit(overflow)
        off.drain()
        off.close()
    assert [str(w.message) for w in seen] == []
    assert pl.read_parquet(tmp_path / "r.parquet")["epsilon_delta"].is_finite().all()
    with warnings.catch_warnings(record=True) as seen, np.errstate(over="warn"):
        warnings.simplefilter("always")
        overflow()
    assert seen
