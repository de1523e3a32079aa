"""Row mode without per-row state (``Session(streaming=True)``, tabdp.frame._stream).

A streaming session keeps each release's public definition and recomputes every record's
losses from the data. It must give exactly what the in-memory ledger gives: the same tables
(the same noise for one seed), the same per-record losses to the last bit, the same
confidential counts and cell audits, on every engine; and it must refuse what the in-memory
row mode refuses.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from _engines import as_engine, mixed_rows, replay_batch_sizes

import tabdp
from tabdp import mechanisms as mech
from tabdp.frame.binding import use_engine
from tabdp.privacy.budget import Budget

KEYS = tabdp.KeySet.from_dict(c=["a", "b", "c"], s=[0, 1, 2])


def _data(n: int = 3000, seed: int = 0) -> pl.DataFrame:
    return mixed_rows(n, seed)


def _session_run(frame: Any, streaming: bool, budget: Any, delta_mech: bool,
                 track_cells: bool = True) -> dict[str, Any]:
    s = tabdp.Session(seed=7, budget=budget, streaming=streaming, track_cells=track_cells)
    out = {
        "sum": frame.dp.sum(["x", "y"], by=["c", "s"], keys=KEYS,
                            mechanism=mech.LogTransform(sigma=0.25, offset=1.0),
                            session=s, nulls="zero", negatives="zero"),
        "count": frame.dp.count(by=["c", "s"], keys=KEYS, mechanism=mech.Gaussian(3.0),
                                session=s),
        "median": frame.dp.median("w", by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
                                  bounds=(0, 50), epsilon=1.0, session=s),
        "joint": frame.dp.sum(["w", "y"], by="c", keys=tabdp.KeySet.from_dict(c=["a", "c"]),
                              mechanism=mech.VectorSubbotin(r=2.0, scale=80.0),
                              session=s, negatives="drop"),
        "by_int": frame.dp.sum("w", by="s", keys=tabdp.KeySet.from_dict(s=[0, 1, 5]),
                                 mechanism=(mech.Subbotin(r=1.5, scale=20.0, delta=1e-9)
                                            if delta_mech else mech.Laplace(20.0)),
                                 session=s),
    }
    rep = s.report(delta=1e-9)
    out["per_record"] = rep.per_record
    summary = rep.confidential_summary()
    out["summary"] = {k: v for k, v in summary.items() if k != "queries"}
    out["queries"] = summary["queries"]
    out["cells"] = [r.cells for r in s.records]
    return out


@pytest.mark.parametrize("engine", ["pandas", "polars", "lazy", "streaming"])
@pytest.mark.parametrize("budget", [None, 0.4, {1e2: 0.2, 1e4: 0.6},
                                    Budget({1e2: 0.2, 1e4: 0.6}, total=0.7)],
                         ids=["none", "constant", "curve", "curve-total"])
@pytest.mark.parametrize("delta_mech", [False, True], ids=["pure", "approx"])
def test_streaming_equals_the_in_memory_ledger(engine: str, tmp_path: Path, budget: Any,
                                               delta_mech: bool) -> None:
    """Tables, noise, per-record losses, counts and cell audits: identical to the last bit."""
    df = _data()
    mem = _session_run(as_engine(df, engine, tmp_path), False, budget, delta_mech)
    st = _session_run(as_engine(df, engine, tmp_path), True, budget, delta_mech)
    for k in ("sum", "count", "median", "joint", "by_int", "per_record"):
        a, b = mem[k], st[k]
        if not isinstance(a, pl.DataFrame):
            a, b = pl.from_pandas(a), pl.from_pandas(b)
        assert a.equals(b), k
    assert mem["summary"] == st["summary"]
    assert mem["queries"] == st["queries"]
    for a, b in zip(mem["cells"], st["cells"], strict=True):
        if a is None:
            assert b is None
            continue
        cols = a.columns
        assert a.sort(cols).equals(b.select(cols).sort(cols))
    if budget is not None:  # the filter did leave records out (the test exercises it)
        assert any(q["units_left_out_by_budget"] for q in st["queries"])


@pytest.mark.parametrize("budget", [None, 0.4], ids=["none", "constant"])
def test_streaming_without_the_cell_audit_equals_the_in_memory_ledger(tmp_path: Path,
                                                                      budget: Any) -> None:
    """Without a budget or cell audit a streaming release sums each measure once per row.

    The same tables, per-record losses and confidential counts (rows outside the key set,
    values dropped or zeroed by the rules) as the in-memory ledger, to the last bit.
    """
    df = _data()
    mem = _session_run(df.lazy(), False, budget, True, track_cells=False)
    st = _session_run(df.lazy(), True, budget, True, track_cells=False)
    for k in ("sum", "count", "median", "joint", "by_int", "per_record"):
        assert mem[k].equals(st[k]), k
    assert mem["summary"] == st["summary"]
    assert mem["queries"] == st["queries"]
    assert any(q["rows_outside_keys"] for q in st["queries"])
    assert all(c is None for c in st["cells"])


@pytest.mark.parametrize("budget", [None, 0.4], ids=["none", "constant"])
@pytest.mark.parametrize("audit", [False, True], ids=["no-audit", "audit"])
def test_a_count_after_a_sum_of_the_same_cells_reads_the_input_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: Any, audit: bool) -> None:
    """A count of the cells the last release aggregated takes its row counts: no pass of its own.

    Only for the same LazyFrame object, grouping and key-set object, in a session without a
    budget or cell audit (the flags of a budget depend on the sum's losses). The tables,
    per-record losses and confidential counts are those of a count reading the input itself
    (a new LazyFrame of the same file), the sum dropping rows the count keeps (nulls="drop").
    """
    from tabdp.frame.backends import polars as backend

    path = tmp_path / "in.parquet"
    _data(2000).write_parquet(path)
    passes: list[str] = []
    read = backend._read_input

    def counted(sess: Any, fn: Any, report: bool) -> Any:
        passes.append("read")
        return read(sess, fn, report)

    monkeypatch.setattr(backend, "_read_input", counted)
    runs = []
    for same in (True, False):
        s = tabdp.Session(seed=3, streaming=True, budget=budget, track_cells=audit)
        lf = pl.scan_parquet(path)
        total = lf.dp.sum(["x", "y"], by=["c", "s"], keys=KEYS, mechanism=mech.Gaussian(50.0),
                          session=s, nulls="drop", negatives="allow")
        passes.clear()
        count = (lf if same else pl.scan_parquet(path)).dp.count(by=["c", "s"], keys=KEYS,
                                                                  session=s)
        reused = not passes
        other = lf.dp.count(by="c", keys=KEYS.project(["c"]), session=s)  # other cells
        rep = s.report(delta=1e-9)
        summary = rep.confidential_summary()
        runs.append((total, count, other, rep.per_record, summary, reused))
    assert runs[0][5] is (budget is None and not audit)
    assert runs[1][5] is False
    for a, b in zip(runs[0][:4], runs[1][:4], strict=True):
        assert a.equals(b)
    assert runs[0][4] == runs[1][4]
    # the count kept the rows the sum dropped (missing x)
    assert runs[0][1]["count"].sum() > 0 and runs[0][4]["queries"][1]["rows_read"] == 2000


def test_key_dtype_alignment_and_key_sets_from_frames(tmp_path: Path) -> None:
    """Categorical / Int32 data keys against String / Int64 key sets, and a non-product set."""
    df = _data(800).with_columns(pl.col("c").cast(pl.Categorical), pl.col("s").cast(pl.Int32))
    ks = tabdp.KeySet.from_frame(pl.DataFrame({"c": ["a", "b", "d"], "s": [0, 3, 1]}))
    outs = []
    for streaming in (False, True):
        s = tabdp.Session(seed=3, streaming=streaming)
        a = df.dp.sum("w", by=["c", "s"], keys=ks, mechanism=mech.Gaussian(5.0), session=s)
        b = df.dp.count(by=["c", "s"], keys=KEYS, mechanism=mech.Gaussian(5.0), session=s)
        outs.append((a, b, s.report().per_record))
    for x, y in zip(*outs, strict=True):
        assert x.equals(y)


def test_a_changed_frame_is_refused_before_anything_is_drawn() -> None:
    df = _data(500)
    s = tabdp.Session(seed=1, streaming=True)
    df.dp.sum("w", by="c", keys=KEYS.project(["c"]), mechanism=mech.Gaussian(5.0), session=s)
    draws = s.rng
    with pytest.raises(tabdp.InvalidParameterError, match="unit="):
        df.reverse().dp.count(by="c", keys=KEYS.project(["c"]), session=s)
    with pytest.raises(tabdp.InvalidParameterError, match="unit="):  # a bound column is gone
        df.drop("w").dp.count(by="c", keys=KEYS.project(["c"]), session=s)
    assert len(s.records) == 1 and s.rng is draws
    assert len(s.ledger.programs) == 1


def test_report_of_an_input_that_changed_is_refused(tmp_path: Path) -> None:
    """The report is recomputed from the input: rewritten since, it is not produced."""
    path = tmp_path / "in.parquet"
    df = _data(400)
    df.write_parquet(path)
    s = tabdp.Session(seed=1, streaming=True)
    pl.scan_parquet(path).dp.count(by="c", keys=KEYS.project(["c"]), session=s)
    assert s.report().per_record.height == 400
    df.reverse().write_parquet(path)
    with pytest.raises(tabdp.InvalidParameterError, match="no longer holds the rows"):
        _ = s.report().per_record
    out = tmp_path / "per_record.parquet"
    with pytest.raises(tabdp.InvalidParameterError, match="no longer holds the rows"):
        s.report().write_per_record(out)
    assert not out.exists()


@pytest.mark.parametrize("sink", [False, True], ids=["collected", "sunk"])
def test_the_report_checks_the_rows_it_reports_in_one_evaluation(tmp_path: Path,
                                                                 sink: bool) -> None:
    """The report's row check reads the rows the report was computed from: one evaluation.

    The input is a plan with a Python step that counts its evaluations; a session without a
    budget writes its report by replaying the releases, and the row count and fingerprints
    it checks come from that same pass (the check's own scan made it two). An input whose
    rows differ between evaluations is still refused, on the rows the report read.
    """
    df = _data(3000)
    evaluations: list[int] = []

    def tap(frame: pl.DataFrame) -> pl.DataFrame:
        evaluations.append(frame.height)
        return frame

    # every column reaches the tap (Polars 1.32 projects the plan through a map otherwise)
    lf = df.lazy().map_batches(tap, schema=df.schema, projection_pushdown=False)
    s = tabdp.Session(seed=1, streaming=True)
    lf.dp.sum(["x"], by=["c", "s"], keys=KEYS, mechanism=mech.Gaussian(50.0), session=s,
              nulls="drop")
    lf.dp.count(by="c", keys=KEYS.project(["c"]), session=s)
    expected = tabdp.Session(seed=1, streaming=False)
    df.dp.sum(["x"], by=["c", "s"], keys=KEYS, mechanism=mech.Gaussian(50.0),
              session=expected, nulls="drop")
    df.dp.count(by="c", keys=KEYS.project(["c"]), session=expected)
    evaluations.clear()
    if sink:
        s.report().write_per_record(tmp_path / "pr.parquet")
        report = pl.read_parquet(tmp_path / "pr.parquet")
    else:
        report = s.report().per_record
    assert evaluations == [3000]
    assert report.equals(expected.report().per_record)
    # rows that differ between evaluations (a new shuffle each time): refused, no file
    moved = df.lazy().filter(pl.int_range(pl.len()).shuffle() < 2990)
    s = tabdp.Session(seed=1, streaming=True)
    moved.dp.count(by="c", keys=KEYS.project(["c"]), session=s)
    out = tmp_path / "moved.parquet"
    with pytest.raises(tabdp.InvalidParameterError, match="no longer holds the rows"):
        if sink:
            s.report().write_per_record(out)
        else:
            _ = s.report().per_record
    assert not out.exists()


def test_the_loss_statistics_check_the_rows_they_are_computed_from() -> None:
    """The report's ρ statistics (`rho_summary`) are read from rows checked as they are read.

    The input is a plan that gives the releases' rows on the first evaluations after the
    releases and other rows afterwards: statistics computed from a later evaluation than the
    one checked would describe rows no release read. Refused (the report's refusal), never
    statistics of other rows.
    """
    df = _data(3000)
    calls = {"after": None}

    def tap(frame: pl.DataFrame) -> pl.DataFrame:
        if calls["after"] is None:
            return frame
        calls["after"] += 1
        if calls["after"] == 1:  # the first evaluation after the releases: the same rows
            return frame
        return frame.with_columns(pl.col("x") * 1000.0)  # other rows from then on

    # every column reaches the tap (Polars 1.32 projects the plan through a map otherwise)
    lf = df.lazy().map_batches(tap, schema=df.schema, projection_pushdown=False)
    s = tabdp.Session(seed=1, streaming=True)
    lf.dp.sum(["x"], by=["c", "s"], keys=KEYS, mechanism=mech.Gaussian(50.0), session=s,
              nulls="drop")
    # the statistics of the releases' rows (an unchanged input)
    fixed = tabdp.Session(seed=1, streaming=True)
    df.lazy().dp.sum(["x"], by=["c", "s"], keys=KEYS, mechanism=mech.Gaussian(50.0),
                     session=fixed, nulls="drop")
    want = fixed.ledger.rho_summary(fixed, [0.5, 0.9])
    rho = fixed.report().per_record["rho"].to_numpy()
    assert want["units"] == 3000 and want["rho_max"] == rho.max()
    calls["after"] = 0
    try:
        got = s.ledger.rho_summary(s, [0.5, 0.9])
    except tabdp.InvalidParameterError as err:
        assert "no longer holds the rows" in str(err)
    else:
        assert got == want


def test_write_per_record_sinks_the_same_table(tmp_path: Path) -> None:
    df = _data(2000)
    tables = []
    for streaming in (False, True):
        s = tabdp.Session(seed=2, budget=0.3, streaming=streaming)
        lf = as_engine(df, "streaming", tmp_path)
        lf.dp.sum(["x"], by=["c", "s"], keys=KEYS, mechanism=mech.Gaussian(50.0), session=s,
                  nulls="drop")
        lf.dp.count(by=["c", "s"], keys=KEYS, session=s)
        path = tmp_path / f"pr_{streaming}.parquet"
        s.report(delta=1e-8).write_per_record(path, rename={"row": "row_id"})
        tables.append(pl.read_parquet(path))
        # the report's own Parquet options (zstd at level 1), whichever engine wrote it
        meta = pq.ParquetFile(path).metadata
        assert {meta.row_group(g).column(i).compression for g in range(meta.num_row_groups)
                for i in range(meta.num_columns)} == {"ZSTD"}
    assert tables[0].equals(tables[1])
    assert tables[1].columns[:2] == ["row_id", "rho"]


def test_releases_run_batch_by_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-row work runs on batches of a Parquet scan, never on the whole input at once."""
    df = _data(300_000)
    path = tmp_path / "big.parquet"
    df.write_parquet(path, row_group_size=20_000)
    sizes = replay_batch_sizes(monkeypatch)
    s = tabdp.Session(seed=1, streaming=True, budget=1.0)  # a budget: the filter runs per row
    pl.scan_parquet(path).dp.count(by=["c", "s"], keys=KEYS, session=s)
    assert sum(sizes) == 300_000
    assert len(sizes) > 1 and max(sizes) < 300_000


def test_settings_and_engines_a_streaming_session_refuses() -> None:
    with pytest.raises(tabdp.InvalidParameterError, match="row mode"):
        tabdp.Session(unit="id", streaming=True)
    with pytest.raises(tabdp.InvalidParameterError, match="True, False or None"):
        tabdp.Session(streaming=1)  # type: ignore[arg-type]
    # a Spark release installs its own replaying ledger (tabdp.frame._spark.SparkReplayLedger)
    use_engine(tabdp.Session(streaming=True), "spark")
    s = tabdp.Session(streaming=True)
    assert s.ledger.lookup(np.array([0, 1]), ["rho"])["rho"].tolist() == [0.0, 0.0]
    _data(50).dp.count(by="c", keys=KEYS.project(["c"]), session=s)
    with pytest.raises(tabdp.InvalidParameterError, match="lookup="):
        s.ledger.lookup(np.array([0]), ["rho"])


def test_an_empty_streaming_session_reports_nothing(tmp_path: Path) -> None:
    s = tabdp.Session(streaming=True)
    rep = s.report(delta=1e-9)
    assert rep.per_record.columns == ["row", "rho", "epsilon", "size", "epsilon_delta"]
    assert rep.confidential_summary()["units"] == 0
    rep.write_per_record(tmp_path / "empty.parquet")
    assert pl.read_parquet(tmp_path / "empty.parquet").height == 0


@pytest.mark.parametrize(("choice", "engine_name", "expected"), [
    (None, "lazy", True), (None, "streaming", True), (None, "polars", False),
    (None, "pandas", False), (False, "streaming", False), (True, "polars", True)])
def test_the_first_input_decides_the_ledger_unless_chosen(
        tmp_path: Path, choice: bool | None, engine_name: str, expected: bool) -> None:
    """streaming=None: a LazyFrame gives the streaming ledger, an eager frame the in-memory one.

    The choice is made from the input's type before any data is read, and kept afterwards.
    """
    s = tabdp.Session(seed=1, streaming=choice)
    frame = as_engine(_data(100), engine_name, tmp_path)
    frame.dp.count(by="c", keys=KEYS.project(["c"]), session=s)
    assert s.streaming is expected
    assert (type(s.ledger).__name__ == "ReplayLedger") is expected
    other = as_engine(_data(100), "polars" if expected else "lazy", tmp_path)
    other.dp.count(by="c", keys=KEYS.project(["c"]), session=s)  # the ledger stays
    assert s.streaming is expected
    assert tabdp.Session(unit="id").streaming is False


def _exact_gauss_rho(delta: Fraction, sigma: float) -> Fraction:
    return delta * delta / (2 * Fraction(sigma) ** 2)



_BIG = [2**53 + 1, -(2**53 + 1), 2**63 - 1, -(2**63), 2**62 + 3, 7, 2**53, -5, 2**53 - 1,
        2**53 + 3, None]


# origin: review R17
@pytest.mark.parametrize("negatives", ["allow", "zero"])
# 2**45 = ρ of Gaussian(2**30) at exactly 2**53: 2**53 - 1 and 2**53 fit, 2**53 + 1 (read as
# 2**53 rounded, then up) does not
@pytest.mark.parametrize("budget", [None, 2.0**45, "curve"])
def test_streaming_report_of_64_bit_integers_equals_the_in_memory_one(
        negatives: str, budget: Any) -> None:
    if budget == "curve":  # per currency, limits by size, a cap on the total
        budget = tabdp.Budget({1.0: 2.0**-40, 2.0**53: 2.0**45, 2.0**62: 2.0**60},
                              total=2.0**61)
    df = pl.DataFrame({"k": ["a", "b", "c", "a", "b", "c", "a", "b", "c", "zz", "a"],
                       "x": pl.Series(_BIG, dtype=pl.Int64),
                       "y": pl.Series([2**64 - 1, 2**63 + 1, 2**53 + 1, 3, 0, 2**64 - 2049, 5,
                                       6, 7, 8, 9], dtype=pl.UInt64)})
    keys = tabdp.KeySet.from_dict(k=["a", "b", "c"])

    def run(streaming: bool) -> list[Any]:
        s = tabdp.Session(seed=3, budget=budget, streaming=streaming)
        src = df.lazy() if streaming else df
        out = []
        for m in (mech.Gaussian(2.0**30), mech.Laplace(2.0**40)):
            out.append(src.dp.sum("x", by="k", keys=keys, mechanism=m, session=s, nulls="zero",
                                  negatives=negatives))
        if negatives == "zero":  # UInt64: no negatives to allow
            out.append(src.dp.sum("y", by="k", keys=keys, mechanism=mech.Gaussian(2.0**31),
                                  session=s))
        out.append(src.dp.count(by="k", keys=keys, session=s))
        out = [o.collect() if isinstance(o, pl.LazyFrame) else o for o in out]
        per = s.report(delta=1e-9).per_record
        return [*out, per]

    eager, streaming = run(False), run(True)
    for x, y in zip(eager, streaming, strict=True):
        assert x.equals(y)
    first = eager[-1]["rho_q1_sum"].to_list()
    assert any(v > 0 for v in first[:10])
    assert budget is None or any(v == 0 for v in first[:10])  # the filter decides both ways
    # h75: the losses are charged at Δ rounded up: never below the exact (|x| / σ)² / 2
    per = eager[-1]
    for i, v in enumerate(_BIG):
        if v is None or per["rho_q1_sum"][i] == 0:
            continue
        d = Fraction(max(v, 0) if negatives == "zero" else abs(v))
        assert Fraction(float(per["rho_q1_sum"][i])) >= _exact_gauss_rho(d, 2.0**30), i


def test_a_report_of_releases_that_saw_every_row_in_a_cell_looks_no_key_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A release whose pass found every row in a cell: its report replay reads no key.

    The session binds the same rows (key columns included) for the report, so they are all in
    a cell again. Only the release with rows outside its key set (``by_int``: s = 2 is not a
    key) has its keys looked up. The tables and per-record losses are the in-memory ledger's.
    """
    import tabdp.frame._stream as stream

    df = _data().filter(pl.col("c") != "d", pl.col("s") < 3)  # every row in a cell of KEYS
    looked_up: list[tuple[str, ...]] = []
    real = stream._row_inside_expr

    def inside(schema: Any, keys: Any, by: list[str]) -> Any:
        looked_up.append(tuple(by))
        return real(schema, keys, by)

    monkeypatch.setattr(stream, "_row_inside_expr", inside)
    mem = _session_run(df.lazy(), False, None, False, track_cells=False)
    s = tabdp.Session(seed=7, streaming=True, track_cells=False)
    st = {
        "sum": df.lazy().dp.sum(["x", "y"], by=["c", "s"], keys=KEYS,
                                mechanism=mech.LogTransform(sigma=0.25, offset=1.0),
                                session=s, nulls="zero", negatives="zero"),
        "count": df.lazy().dp.count(by=["c", "s"], keys=KEYS, mechanism=mech.Gaussian(3.0),
                                    session=s),
    }
    assert s.ledger.whole == {0, 1}
    looked_up.clear()
    mem_s = tabdp.Session(seed=7, track_cells=False)
    df.lazy().dp.sum(["x", "y"], by=["c", "s"], keys=KEYS,
                     mechanism=mech.LogTransform(sigma=0.25, offset=1.0), session=mem_s,
                     nulls="zero", negatives="zero")
    df.lazy().dp.count(by=["c", "s"], keys=KEYS, mechanism=mech.Gaussian(3.0), session=mem_s)
    assert st["sum"].equals(mem["sum"]) and st["count"].equals(mem["count"])
    assert s.report(delta=1e-9).per_record.equals(mem_s.report(delta=1e-9).per_record)
    assert looked_up == []  # neither release's keys are looked up by the report
    # a release with rows outside its key set is not marked: its report looks its keys up
    df.lazy().dp.sum("w", by="s", keys=tabdp.KeySet.from_dict(s=[0, 1]),
                     mechanism=mech.Laplace(20.0), session=s)
    assert s.ledger.whole == {0, 1}
    assert s.report().per_record.height == df.height
    assert looked_up == [("s",)]
