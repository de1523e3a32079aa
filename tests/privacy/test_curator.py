"""Issue 27, the Python side: author mode driven through the curator's object (tabdp.Curator).

Each Python case of the issue's findings 3-5 as a regression test on the engines (pandas, Polars
eager, Polars lazy, Polars streaming from Parquet, Spark), and neighbouring datasets D / D' on
which the author's whole view (returned frames' non-noise columns and dtypes, exceptions and
their messages, warnings) must be identical.
"""

from __future__ import annotations

import pathlib
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech
from tabdp.exceptions import DataFailure, DataValidationError, InvalidParameterError, SpecError
from tabdp.frame import binding

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from pathlib import Path

from _engines import as_polars  # noqa: E402

from tabdp.exceptions import TabdpWarning

KEYS = tabdp.KeySet.from_dict(c=["a", "b"])
SCHEMA = {"c": "String", "x": "Float64"}
NOISE = ("_sd", "_moe", "_lower", "_upper", "_cv")


def _frame_view(out: Any) -> tuple[Any, ...]:
    """The non-noise part of a returned table: type, columns, dtypes, key columns, rows."""
    table = as_polars(out)
    keys = [c for c in table.columns if c == "c"]
    return (type(out).__name__, tuple(table.columns), tuple(str(t) for t in table.dtypes),
            table.select(keys).rows(), table.height)


def author_view(run: Callable[[], Any]) -> tuple[Any, ...]:
    """Everything the author sees of ``run()``: table (non-noise part) or error, warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = run()
            got: Any = ("ok", result if isinstance(result, (dict, list, str)) else
                        _frame_view(result))
        except Exception as err:  # noqa: BLE001 - what the author sees
            got = ("raised", type(err).__name__, str(err),
                   err.__cause__ is None, err.__context__ is None)
    return got, tuple((w.category.__name__, str(w.message)) for w in caught)


def _releases(author: tabdp.AuthorSession) -> list[Callable[[], Any]]:
    """One of each release kind, as the author makes them."""
    return [
        lambda: author.sum("x", by="c", keys=KEYS, mechanism=mech.Gaussian(5.0), nulls="zero",
                           negatives="allow"),
        lambda: author.count(by="c", keys=KEYS),
        lambda: author.median("x", by="c", keys=KEYS, bounds=(0.0, 100.0), epsilon=1.0,
                              nulls="drop"),
        lambda: [q["kind"] for q in author.summary()["queries"]],
    ]


def _all_views(curator: tabdp.Curator) -> list[Any]:
    author = curator.author_session("d")
    views = []
    for call in _releases(author):
        views.append(author_view(call))
    return views


# -- finding 3: a key set read from the data ---------------------------------------------------
def test_keys_from_data_refused_from_the_argument(to_engine: Callable[[Any], Any]) -> None:
    df = pl.DataFrame({"c": ["a", "secret"], "x": [1.0, 2.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data_keys = tabdp.KeySet.from_data(df, ["c"])
    cur = tabdp.Curator(seed=1)
    cur.add("d", to_engine(df), schema=SCHEMA)
    author = cur.author_session("d")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an error, not a warning
        with pytest.raises(InvalidParameterError, match="read from the data"):
            author.count(by="c", keys=data_keys)
        with pytest.raises(InvalidParameterError, match="read from the data"):
            author.sum("x", by="c", keys=data_keys.project(["c"]),
                       mechanism=mech.Gaussian(1.0), nulls="zero", negatives="allow")
        with pytest.raises(InvalidParameterError, match="read from the data"):
            author.median("x", by="c", keys=data_keys, bounds=(0, 9), epsilon=1.0,
                          nulls="zero")
    assert cur.session(author.name).records == []
    # a bare author-mode Session refuses it before it even binds (pins) its frame
    s = tabdp.Session(mode="author")
    frame = to_engine(df)
    with pytest.raises(InvalidParameterError, match="read from the data"):
        frame.dp.count(by="c", keys=data_keys, session=s)
    assert binding.of(s).bound is None and s.records == []


# -- finding 4: pinning at creation, declared dtypes -------------------------------------------
def _pandas_pair(junk_d: object, junk_n: object) -> tuple[pd.DataFrame, pd.DataFrame]:
    base = {"c": ["a", "b", "a"], "x": [10.0, 20.0, 30.0]}
    d = pd.DataFrame({**base, "junk": pd.Series([junk_d] * 3, dtype=object)})
    n = pd.DataFrame({**base, "junk": pd.Series([junk_d, junk_d, junk_n], dtype=object)})
    return d, n


def test_unused_pandas_object_column_is_no_oracle() -> None:
    d, n = _pandas_pair(7, "abc")  # "abc" vs 7 in a column no release names
    views = []
    for frame in (d, n):
        cur = tabdp.Curator(seed=1)
        cur.add("d", frame, schema=SCHEMA)
        views.append(_all_views(cur))
    assert views[0] == views[1]
    assert views[0][0][0][0] == "ok"
    # the pandas dataset's tables come back as pandas, sums in Float64
    assert views[0][0][0][1][0] == "DataFrame" and views[0][0][0][1][2][1] == "Float64"


def test_undeclared_column_of_another_dtype_is_no_oracle(
        to_engine: Callable[[Any], Any]) -> None:
    base = {"c": ["a", "b", "a"], "x": [10.0, 20.0, 30.0]}
    d = pl.DataFrame({**base, "junk": [7, 7, 7]})
    n = pl.DataFrame({**base, "junk": ["7", "7", "abc"]})
    views = []
    for frame in (d, n):
        cur = tabdp.Curator(seed=1)
        cur.add("d", to_engine(frame), schema=SCHEMA)
        views.append(_all_views(cur))
    assert views[0] == views[1]
    assert all(v[0][0] == "ok" for v in views[0])


def test_mixed_type_keys_fail_at_creation_plainly_for_the_curator() -> None:
    ok = pd.DataFrame({"c": pd.Series(["a", "b"], dtype=object), "x": [1.0, 2.0]})
    mixed = pd.DataFrame({"c": pd.Series(["a", 1], dtype=object), "x": [1.0, 2.0]})
    cur = tabdp.Curator(seed=1)
    cur.add("ok", ok, schema=SCHEMA)
    cur.add("mixed", mixed, schema=SCHEMA)
    author = cur.author_session("ok")
    assert author_view(lambda: author.count(by="c", keys=KEYS))[0][0] == "ok"
    # the curator's own call raises, with the cause chained; no session exists for an author
    with pytest.raises(DataValidationError, match="could not be pinned") as info:
        cur.author_session("mixed", name="m")
    assert info.value.__cause__ is not None
    assert "m" not in cur.sessions


@pytest.mark.parametrize("kind", ["pandas", "polars", "lazy"])
def test_untyped_empty_frame_is_no_oracle(kind: str) -> None:
    def frame(rows: dict[str, list[Any]]) -> Any:
        if kind == "pandas":
            return pd.DataFrame({k: pd.Series(v, dtype=object) for k, v in rows.items()})
        f = pl.DataFrame(rows)  # empty: Null dtypes
        return f.lazy() if kind == "lazy" else f

    views = []
    for rows in ({"c": [], "x": []}, {"c": ["a"], "x": [5.0]}):
        cur = tabdp.Curator(seed=1)
        cur.add("d", frame(rows), schema=SCHEMA)
        views.append(_all_views(cur))
    assert views[0] == views[1]
    assert all(v[0][0] == "ok" for v in views[0])
    if kind != "pandas":  # without a declared schema, the curator is told (at creation)
        cur = tabdp.Curator()
        cur.add("d", frame({"c": [], "x": []}))
        with pytest.raises(InvalidParameterError, match="no usable dtype"):
            cur.author_session("d")


def _csv(tmp_path: pathlib.Path, bad: bool) -> pathlib.Path:
    rows = ["c,x,y"] + [f"a,{i}.5,1" for i in range(300)]
    if bad:
        rows[202] = "b,SECRET-123456.78,1"
    path = tmp_path / f"in-{bad}.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_scan_csv_parse_failure_is_the_curators_at_creation(tmp_path: pathlib.Path) -> None:
    for bad in (False, True):
        cur = tabdp.Curator(seed=1)
        cur.add("d", pl.scan_csv(_csv(tmp_path, bad)), schema=SCHEMA)
        if not bad:
            author = cur.author_session("d")
            assert author_view(lambda a=author: a.count(by="c", keys=KEYS))[0][0] == "ok"
            continue
        with pytest.raises(DataValidationError, match="could not be pinned") as info:
            cur.author_session("d")
        assert "SECRET" not in str(info.value)  # only in the chained cause
        assert "SECRET" in str(info.value.__cause__)
    # a column no release names is not read: its parse failure changes nothing
    cur = tabdp.Curator(seed=1)
    cur.add("d", pl.scan_csv(_csv(tmp_path, True), schema_overrides={"x": pl.String}),
            schema={"c": "String", "y": "Float64"})
    author = cur.author_session("d")
    assert author_view(lambda: author.sum("y", by="c", keys=KEYS, mechanism=mech.Gaussian(1.0),
                                          nulls="zero", negatives="allow"))[0][0] == "ok"


def test_pinning_inside_an_authors_call_is_the_generic_failure(
        tmp_path: pathlib.Path) -> None:
    """A bare author-mode Session bound at its first release: pinning fails in the call."""
    views = []
    sessions = []
    for bad in (False, True):
        s = tabdp.Session(mode="author", seed=1)
        sessions.append(s)
        lf = pl.scan_csv(_csv(tmp_path, bad))
        views.append(author_view(lambda s=s, lf=lf: lf.dp.count(by="c", keys=KEYS, session=s)))
    assert views[0][0][0] == "ok"
    raised = views[1][0]
    assert raised[:2] == ("raised", "DataFailure")
    assert "SECRET" not in raised[2] and raised[3] and raised[4]  # no cause, no context
    failures = sessions[1].report().confidential_summary()["author_failures"]
    assert "SECRET" in failures[0]["error"]  # the curator reads the details


@pytest.mark.parametrize("declared", [None, "Int64", "Float64"])
def test_sum_dtype_does_not_follow_pandas_written_parquet(tmp_path: pathlib.Path,
                                                          declared: str | None) -> None:
    dtypes = []
    for i, x in enumerate(([1, 2, 3], [1, 2, None])):  # D' has one missing value
        path = tmp_path / f"p{i}.parquet"
        pd.DataFrame({"c": ["a", "b", "a"], "x": x}).to_parquet(path)  # int64 / float64
        if declared is None:  # a bare author-mode session: integrality never declared
            s = tabdp.Session(mode="author", seed=1)
            out = pl.scan_parquet(path).dp.sum("x", by="c", keys=KEYS,
                                               mechanism=mech.Gaussian(1.0), nulls="zero",
                                               session=s, negatives="allow")
        else:
            cur = tabdp.Curator(seed=1)
            cur.add("d", path, schema={"c": "String", "x": declared})
            out = cur.author_session("d").sum("x", by="c", keys=KEYS,
                                              mechanism=mech.Gaussian(1.0), nulls="zero",
                                              negatives="allow")
        dtypes.append(out["x"].dtype)
    assert dtypes[0] == dtypes[1] == (pl.Int64 if declared == "Int64" else pl.Float64)


@pytest.mark.parametrize("kind", ["pandas", "polars", "lazy"])
def test_declared_integer_makes_fractions_null_and_tells_the_curator(kind: str) -> None:
    """A value the declared dtype cannot represent is null (never truncated), as in tabdp run.

    The curator's call warns with the counts (its own call: CONFIDENTIAL); the author's
    tables are those of the dataset with that value missing.
    """
    raw = {"c": ["a", "a", "b"], "x": [1.0, 1.5, 2.0]}
    data: Any = (pd.DataFrame(raw) if kind == "pandas" else
                 pl.DataFrame(raw).lazy() if kind == "lazy" else pl.DataFrame(raw))
    cur = tabdp.Curator(seed=1)
    cur.add("d", data, schema={"c": "str", "x": "Int64"})
    with pytest.warns(tabdp.exceptions.TabdpWarning, match=r"\{'x': 1\}.*CONFIDENTIAL"):
        author = cur.author_session("d", name="s")
    out = author.sum("x", by="c", keys=KEYS, mechanism=mech.Gaussian(1e-9), nulls="drop",
                     negatives="allow")
    out = pl.from_pandas(out) if kind == "pandas" else out
    assert out["x"].dtype == pl.Int64
    assert dict(zip(out["c"], out["x"], strict=True)) == {"a": 1, "b": 2}


def test_engine_failure_after_reading_is_generic(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Rust panic (a BaseException) or any error after the data phase: one fixed failure."""
    import tabdp.frame.backends.polars as rel

    class FakePanic(BaseException):  # pyo3_runtime.PanicException derives from BaseException
        pass

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise FakePanic("assertion failed: value SECRET-42 out of range")

    cur = tabdp.Curator(seed=1)
    cur.add("d", pl.DataFrame({"c": ["a"], "x": [1.0]}))
    author = cur.author_session("d", name="s")
    monkeypatch.setattr(rel, "_take_snapshot", boom)
    got = author_view(lambda: author.count(by="c", keys=KEYS))
    assert got[0][:2] == ("raised", "DataFailure")
    assert got[0][2] == DataFailure.MESSAGE and got[0][3] and got[0][4]
    assert got[1] == ()
    assert "SECRET-42" in cur.report("s").confidential_summary()["author_failures"][0]["error"]
    # data-free refusals are raised as themselves; interrupts pass
    with pytest.raises(InvalidParameterError, match="nulls='error'"):
        author.sum("x", by="c", keys=KEYS, mechanism=mech.Gaussian(1.0), negatives="allow")

    def interrupt(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(rel, "_take_snapshot", interrupt)
    with pytest.raises(KeyboardInterrupt):
        author.count(by="c", keys=KEYS)


def test_warnings_of_the_data_phase_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    import tabdp.frame.backends.polars as rel

    real = rel._take_snapshot

    def noisy(*args: Any, **kwargs: Any) -> Any:
        warnings.warn("value SECRET-9 overflowed", RuntimeWarning, stacklevel=1)
        return real(*args, **kwargs)

    monkeypatch.setattr(rel, "_take_snapshot", noisy)
    cur = tabdp.Curator(seed=1)
    cur.add("d", pl.DataFrame({"c": ["a"], "x": [1.0]}))
    got = author_view(lambda: cur.author_session("d").count(by="c", keys=KEYS))
    assert got[0][0] == "ok" and got[1] == ()
    # a usability warning about the arguments (before any read) still reaches the author
    author = cur.author_session("d")
    with pytest.warns(tabdp.exceptions.UsabilityWarning) as rec:
        author.count(by="c", keys=KEYS, mechanism=mech.SymmetricStable(1.5, 1.0))
    assert len(rec) == 1 and rec[0].filename == __file__  # at the caller's line


def test_author_session_exposes_releases_and_the_public_summary_only() -> None:
    cur = tabdp.Curator(seed=1, budget=1.0)
    cur.add("d", pl.DataFrame({"c": ["a"], "x": [1.0]}))
    author = cur.author_session("d", name="alice")
    public = {n for n in dir(author) if not n.startswith("_")}
    assert public == {"sum", "count", "median", "quantile", "summary", "schema", "name",
                      "dataset"}
    assert "per_record" not in repr(author) and author.summary()["session"]["mode"] == "author"
    with pytest.raises(InvalidParameterError, match="created by the curator"):
        tabdp.AuthorSession(_token=object(), session=cur.session("alice"), frame=None,
                            name="x", dataset="d", schema={}, pandas=False)
    with pytest.raises(InvalidParameterError, match="declared schema"):
        cur.add("p", pd.DataFrame({"x": [1.0]}))
    with pytest.raises(InvalidParameterError, match="unknown column type"):
        cur.add("q", pl.DataFrame({"x": [1.0]}), schema={"x": "real"})


def test_from_config_takes_any_config_object(tmp_path: pathlib.Path) -> None:
    from types import SimpleNamespace as NS

    path = tmp_path / "d.parquet"
    pl.DataFrame({"c": ["a", "b"], "x": [1, 2], "secret": ["s", "t"]}).write_parquet(path)
    cfg = NS(datasets={"d": NS(path=str(path), table=None, hive_partitioning=False,
                               schema={"c": "String", "x": "Int32"})},
             defaults=NS(budget=10.0, seed=4))
    cur = tabdp.Curator.from_config(cfg)
    author = cur.author_session("d")
    assert author.schema == {"c": "String", "x": "Int32"}
    out = author.sum("x", by="c", keys=KEYS, mechanism=mech.Gaussian(1.0), nulls="zero",
                     negatives="allow")
    assert out["x"].dtype == pl.Int64  # declared integer
    assert cur.session(author.name).budget is not None


@pytest.mark.parametrize("line", ["", "hive_partitioning = true\n"])
def test_from_file_reads_partition_folders_as_tabdp_run_does(tmp_path: pathlib.Path,
                                                             line: str) -> None:
    """Partition folders are read as ``tabdp run`` reads them (review rev64a).

    A configuration that leaves ``hive_partitioning`` out (``tabdp run``: detected) gave the
    Python curator no partition columns: every value of ``state``, held only by the folders'
    names, was null, and each author's table was noise around 0.
    """
    for state, ids in (("01", [1, 2]), ("02", [3])):
        (tmp_path / "data" / f"state={state}").mkdir(parents=True)
        pl.DataFrame({"id": ids, "v": ids}).write_parquet(
            tmp_path / "data" / f"state={state}" / "p.parquet")
    (tmp_path / "curator.toml").write_text(
        f'[datasets.d]\npath = "data"\n{line}'
        'schema = { id = "Int64", state = "String", v = "Int64" }\nunit = "id"\n',
        encoding="utf-8")
    cur = tabdp.Curator.from_file(tmp_path / "curator.toml")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "in none of its files" warning either
        author = cur.author_session("d", seed=3)
    out = author.count(by="state", keys=tabdp.KeySet.from_dict(state=["01", "02"]),
                       mechanism=mech.DiscreteGaussian(sigma=1e-3))
    assert out.sort("state")["count"].to_list() == [2, 1]


def test_from_file_reads_the_cli_configuration(tmp_path: pathlib.Path) -> None:
    """The file ``tabdp run --curator`` reads gives the Python curator.

    Its datasets, declared schema (dtype names of the file format) and default budget.
    """
    path = tmp_path / "d.parquet"
    pl.DataFrame({"c": ["a", "b", "a"], "x": [1, 2, 40], "secret": ["s", "t", "u"]}
                 ).write_parquet(path)
    (tmp_path / "curator.toml").write_text(
        '[datasets.d]\npath = "d.parquet"\nschema = { c = "String", x = "Float64" }\n'
        '[defaults]\nbudget = { rho = { "1" = 0.5, "100" = 3.0 } }\n', encoding="utf-8")
    cur = tabdp.Curator.from_file(tmp_path / "curator.toml")
    assert cur.datasets == ["d"] and cur.budget == {1.0: 0.5, 100.0: 3.0}
    author = cur.author_session("d", seed=3)
    assert author.schema == {"c": "String", "x": "Float64"}
    out = author.sum("x", by="c", keys=KEYS, mechanism=mech.Gaussian(1.0), nulls="zero",
                     negatives="allow")
    assert out["x"].dtype == pl.Float64 and out.height == 2
    # the curve budget is the one enforced: a unit is left out where x**2 / 2 passes the curve
    # at its size (x = 40: 800 > 3), a count the curator sees and the author does not
    x = np.array([1.0, 2.0, 40.0])
    want = int((x**2 / 2 > tabdp.Budget({1: 0.5, 100: 3.0}).limit(x)).sum())
    assert want >= 1
    summary = cur.report(author.name).confidential_summary()
    assert summary["queries"][0]["units_left_out_by_budget"] == want
    with pytest.raises(SpecError):
        (tmp_path / "bad.toml").write_text("[datasets.d]\nsize = 1\n", encoding="utf-8")
        tabdp.Curator.from_file(tmp_path / "bad.toml")


# -- finding 5: streaming drift ------------------------------------------------------------------
@pytest.mark.parametrize("rewrite", ["garbage", "schema", "removed"])
def test_streaming_drift_is_always_the_refusal(tmp_path: pathlib.Path, rewrite: str) -> None:
    path = tmp_path / "in.parquet"
    pl.DataFrame({"c": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]}).write_parquet(path)
    s = tabdp.Session(seed=1, budget=10.0)
    lf = pl.scan_parquet(path)
    lf.dp.sum("x", by="c", keys=KEYS, mechanism=mech.Gaussian(1.0), session=s)
    if rewrite == "garbage":  # Polars panics (a BaseException) reading it
        path.write_bytes(b"PAR1" + b"garbage" * 10 + b"PAR1")
    elif rewrite == "schema":
        pl.DataFrame({"c": [1, 2], "x": ["u", "v"]}).write_parquet(path)
    else:
        path.unlink()
    for report in (lambda: s.report().per_record,
                   lambda: s.report().confidential_summary(),
                   lambda: s.report().write_per_record(tmp_path / "pr.parquet")):
        with pytest.raises(InvalidParameterError, match="re-create it"):
            report()
    assert not (tmp_path / "pr.parquet").exists()
    with pytest.raises(InvalidParameterError, match="re-create it"):
        lf.dp.count(by="c", keys=KEYS, session=s)
    with pytest.raises(InvalidParameterError, match="re-create it"):
        lf.dp.median("x", by="c", keys=KEYS, bounds=(0, 9), epsilon=1.0, session=s)
    assert len(s.records) == 1


# -- Spark ------------------------------------------------------------------------------------
@pytest.mark.spark
def test_spark_curator_author_view_and_refusals(spark: Any) -> None:
    from _engines import as_spark

    base = {"c": ["a", "b", "a"], "x": [10.0, 20.0, 30.0]}
    views = []
    for junk in ([7, 7, 7], [7, 7, None]):
        cur = tabdp.Curator(seed=1)
        cur.add("d", as_spark(pl.DataFrame({**base, "junk": junk})), schema=SCHEMA)
        author = cur.author_session("d")
        views.append([author_view(lambda a=author: a.count(by="c", keys=KEYS)),
                      author_view(lambda a=author: a.sum("x", by="c", keys=KEYS,
                                                         mechanism=mech.Gaussian(1.0),
                                                         nulls="zero", negatives="allow"))])
    assert views[0] == views[1]
    assert views[0][1][0][1][2][1] == "Float64"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data_keys = tabdp.KeySet.from_data(pl.DataFrame(base), ["c"])
    with pytest.raises(InvalidParameterError, match="read from the data"):
        author.count(by="c", keys=data_keys)
    # a typed Spark frame without a declared schema: its own schema, pinned at creation
    cur = tabdp.Curator(seed=1)
    cur.add("t", as_spark(pl.DataFrame({"c": ["a"], "n": [3]})))
    out = cur.author_session("t").sum("n", by="c", keys=KEYS, mechanism=mech.Gaussian(1.0),
                                      nulls="zero", negatives="allow")
    assert dict(out.dtypes)["n"] == "bigint"  # declared integer by the frame's own type


R15_KEYS = tabdp.KeySet.from_dict(c=["a", "b"])


pa = pytest.importorskip("pyarrow")


pq = pytest.importorskip("pyarrow.parquet")


# -- R15-1 (fixed): the curator's pinning of a path dataset -----------------------------------
def _folder(root: Path, *, base: bool, extra: dict[str, Any] | None) -> Path:
    """A dataset folder: two records (file a) unless not ``base``, plus one file of one record."""
    root.mkdir(parents=True)
    if base:
        pq.write_table(pa.table({"u": pa.array([1, 2], pa.int64()), "c": ["a", "b"]}),
                       root / "a.parquet")
    if extra is not None:
        pq.write_table(pa.table({"u": pa.array([3], pa.int64()), "c": ["b"], **extra}),
                       root / "b.parquet")
    return root


def _view(run: Callable[[], Any]) -> tuple[Any, ...]:
    """What the author sees of one call: the table's non-noise part (or the error), warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = run()
            got: Any = ("ok", out if isinstance(out, (dict, str)) else
                        (tuple(out.columns), tuple(map(str, out.dtypes)),
                         out.select(out.columns[0]).rows(), out.height))
        except Exception as err:  # noqa: BLE001 - what the author sees
            got = ("raised", type(err).__name__, str(err), err.__cause__, err.__context__)
    return got, tuple((w.category.__name__, str(w.message)) for w in caught)


# origin: review R15
@pytest.mark.parametrize("case", ["column_in_one_file", "empty_folder"])
def test_r15_1_declared_column_in_one_file_only(tmp_path: Path, case: str) -> None:
    """R15-1 (fixed): a declared column that only D''s one more file holds.

    ``Curator.author_session`` on a Parquet folder refused a declared column found in none
    of the files (``InvalidParameterError``), so on D (no file with ``w``, or an empty folder)
    the author got no session and on D' (one more file, one record, with ``w``) got one:
    whether the server could serve the author at all depended on one record, and the
    Python curator read the dataset unlike ``tabdp run`` (where such a column is nulls). Now
    the column reads as nulls on both, and the curator (only) is warned.
    """
    base = case == "column_in_one_file"
    views = []
    for name, extra in (("D", None), ("Dp", {"w": pa.array([7.0])})):
        cur = tabdp.Curator(seed=1)
        cur.add("d", _folder(tmp_path / name, base=base, extra=extra),
                schema={"u": "Int64", "c": "String", "w": "Float64"}, unit="u")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            author = cur.author_session("d")
        told = [str(w.message) for w in caught if issubclass(w.category, TabdpWarning)]
        assert any("in none of its files" in t for t in told) == (name == "D"), told
        views.append([_view(lambda a=author: a.sum("w", by="c", keys=R15_KEYS, nulls="drop",
                                                   mechanism=mech.Gaussian(3.0),
                                                   negatives="zero")),
                      _view(lambda a=author: a.count(by="c", keys=R15_KEYS)),
                      _view(lambda a=author: repr(a))])
    assert views[0] == views[1]
    assert views[0][0][0][0] == "ok"


# -- held: one record at a value edge, through tabdp.Curator and the release kinds ----------
_BASE = pl.DataFrame({"u": list(range(10)), "c": ["a"] * 5 + ["b"] * 5,
                      "x": [float(i) for i in range(10)], "n": list(range(10))},
                     schema={"u": pl.Int64, "c": pl.String, "x": pl.Float64, "n": pl.Int64})


_EDGES = {"x_1e308": {"x": 1e308}, "x_inf": {"x": float("inf")}, "x_nan": {"x": float("nan")},
          "n_max": {"n": 2**63 - 1}, "n_min": {"n": -2**63}, "u_null": {"u": None},
          "c_null": {"c": None}, "u_dup": {"u": 3}}


def _calls(a: tabdp.AuthorSession) -> list[Callable[[], Any]]:
    g = mech.Gaussian(5.0)
    return [
        lambda: a.sum(["x", "n"], by="c", keys=R15_KEYS, mechanism=g, nulls="drop",
                      negatives="allow", cv=True, form="long"),
        lambda: a.sum("n", by="c", keys=R15_KEYS, mechanism=mech.DiscreteGaussian(5.0),
                      nulls="zero", negatives="zero", max_cells=1),
        lambda: a.sum("x", by="c", keys=R15_KEYS, mechanism=mech.LogTransform(1.0, 1.0),
                      nulls="zero", negatives="zero"),
        lambda: a.sum("x", by="c", keys=R15_KEYS, mechanism=mech.SymmetricStable(1.5, 3.0),
                      nulls="zero", negatives="allow", grid=0.25),
        lambda: a.count(by="c", keys=R15_KEYS, max_rows=1, cv=True),
        lambda: a.median("x", by="c", keys=R15_KEYS, bounds=(0.0, 100.0), epsilon=1.0,
                         nulls="drop", cv=True),
        lambda: a.quantile("n", 1.0, by="c", keys=R15_KEYS, bounds=(-1e19, 1e19), epsilon=1.0,
                           noise="laplace", delta=1e-6, nulls="zero"),
        lambda: a.summary(),
    ]


def _python_views(frame: pl.DataFrame, budget: float | None) -> list[Any]:
    cur = tabdp.Curator(seed=5, budget=budget)
    cur.add("d", frame, schema={"u": "Int64", "c": "String", "x": "Float64", "n": "Int64"},
            unit="u")
    author = cur.author_session("d", name="s")
    return [_view(call) for call in _calls(author)]


# origin: review R15
@pytest.mark.parametrize("budget", [None, 2.0])
def test_r15_python_value_edges_change_only_the_noise(budget: float | None) -> None:
    """Held: D' = D plus one record at a value edge; every release kind and the summary.

    Sums (Gaussian with ``cv`` and long form, discrete Gaussian with ``max_cells``, a
    transformation mechanism, symmetric stable with a grid), counts with ``max_rows``,
    medians and quantiles (±2**63 with bounds of ±1e19, 1e308, ±inf, NaN, a null unit, a
    null key, a unit id shared with a record of D): the same columns, dtypes, keys, rows,
    warnings, errors and public summary on both (under a budget too).
    """
    d = _python_views(_BASE, budget)
    assert all(v[0][0] == "ok" for v in d), d
    for label, rec in _EDGES.items():
        row = {"u": 100, "c": "b", "x": 5.0, "n": 5, **rec}
        extra = pl.DataFrame([row], schema=_BASE.schema)
        assert _python_views(pl.concat([_BASE, extra]), budget) == d, label


# origin: review R15
# -- R15-4 (fixed): a joint release's currency was the order of its measures -------------
def test_r15_4_joint_currency_does_not_depend_on_the_measures_order() -> None:
    """R15-4: the same measures released jointly in the other order get a fresh budget.

    Under a curve budget each currency has its own limit. A flat curve of ρ = 1 per
    currency; unit 1 contributes (100, 100), charged ρ ≈ 0.6 by a joint Gaussian release of
    (x, y). After ``["x", "y"]`` the unit has 0.6 of its 1.0 in
    currency ``x+y``, so a second joint release of the same measures must leave it out,
    whatever their order; ``["y", "x"]`` was currency ``y+x`` and admitted it again (its
    total over the session: 1.2 for one pair of measures; with k measures, k! orders).
    """
    df = pl.DataFrame({"u": [1, 2, 3], "c": ["a"] * 3, "x": [100.0, 1.0, 1.0],
                       "y": [100.0, 1.0, 1.0]})
    keys = tabdp.KeySet.from_dict(c=["a"])
    cur = tabdp.Curator(seed=1, budget={1.0: 1.0, 1e6: 1.0})
    cur.add("d", df, schema={"u": "Int64", "c": "String", "x": "Float64", "y": "Float64"},
            unit="u")
    author = cur.author_session("d", name="s")
    joint = mech.VectorSubbotin(2, 129.0)
    for order in (["x", "y"], ["y", "x"]):
        author.sum(order, by="c", keys=keys, mechanism=joint, nulls="zero", negatives="zero")
    left_out = [q["units_left_out_by_budget"]
                for q in cur.report("s").confidential_summary()["queries"]]
    assert left_out == [0, 1]


@pytest.mark.parametrize("call", ["count", "median"])
def test_an_engine_failure_before_its_first_phase_is_generic(
        monkeypatch: pytest.MonkeyPatch, call: str) -> None:
    """The pipeline marks the data phase before it hands a release to its engine.

    An engine that fails before its own first progress line (Spark's median ran its row-id,
    fingerprint and per-cell jobs before it; review r60) still gives the author the one fixed
    failure, its details kept for the curator: here every engine call of the release raises
    at once, before any phase of its own.
    """
    from tabdp.frame.backends import polars as backends

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("job failed on value SECRET-99")

    monkeypatch.setattr(backends.MemoryBackend, "aggregate", boom)
    monkeypatch.setattr(backends.MemoryBackend, "quantile_data", boom)
    cur = tabdp.Curator(seed=1)
    cur.add("d", pl.DataFrame({"c": ["a", "b"], "x": [1.0, 2.0]}))
    author = cur.author_session("d", name="s")
    run = (lambda: author.count(by="c", keys=KEYS)) if call == "count" else (
        lambda: author.median("x", by="c", keys=KEYS, bounds=(0.0, 10.0), epsilon=1.0,
                              nulls="drop"))
    got = author_view(run)
    assert got[0][:2] == ("raised", "DataFailure"), got
    assert got[0][2] == DataFailure.MESSAGE and got[1] == ()
    assert "SECRET-99" in cur.report("s").confidential_summary()["author_failures"][0]["error"]


@pytest.mark.spark
def test_spark_decimal_keys_reach_the_author_as_on_polars(spark: Any, tmp_path: Path) -> None:
    """Decimal key columns on Spark (review r61; accepted since stop 64, as on Polars).

    A count and a median by a decimal key run in an author session on Spark, publish the key in
    the data's decimal type, and nothing is recorded as a failure of a read.
    """
    import decimal

    dec = pl.Decimal(10, 2)
    pl.DataFrame({"k": pl.Series([decimal.Decimal("1.00"), decimal.Decimal("2.00")], dtype=dec),
                  "x": [1.0, 2.0]}).write_parquet(tmp_path / "d.parquet")
    cur = tabdp.Curator(seed=1)
    cur.add("d", spark.read.parquet(str(tmp_path / "d.parquet")))
    author = cur.author_session("d", name="s")
    keys = tabdp.KeySet.from_frame(pl.DataFrame({"k": pl.Series([decimal.Decimal("1.00")],
                                                               dtype=dec)}))
    counted = author.count(by="k", keys=keys)
    median = author.median("x", by="k", keys=keys, bounds=(0.0, 10.0), epsilon=1.0,
                           nulls="drop")
    for out in (counted, median):  # Spark frames, the key in the data's decimal type
        assert dict(out.dtypes)["k"] == "decimal(10,2)"
        assert [r["k"] for r in out.select("k").collect()] == [decimal.Decimal("1.00")]
    assert not cur.report("s").confidential_summary().get("author_failures")


def test_a_median_refuses_text_keys_against_numbers_before_reading() -> None:
    """A median checks its key set against the schema when planned, as sums and counts do."""
    from tabdp.exceptions import ColumnTypeError

    cur = tabdp.Curator(seed=1)
    cur.add("d", pl.DataFrame({"c": [1, 2], "x": [1.0, 2.0]}))
    author = cur.author_session("d", name="s")
    with pytest.raises(ColumnTypeError, match="numbers and text"):
        author.median("x", by="c", keys=KEYS, bounds=(0.0, 10.0), epsilon=1.0, nulls="drop")
    assert not cur.report("s").confidential_summary().get("author_failures")


# origin: review rev65x
@pytest.mark.parametrize("declared", [False, True])
def test_enum_categories_from_the_data_are_not_the_authors(declared: bool) -> None:
    """An Enum's categories (its dtype) reached the author: the schema and refusals named them.

    A curator's Polars frame (or declaration) with an Enum built from the data
    (``pl.Enum(df["c"].unique())``) has one category more on the neighbour whose one more
    record holds ``zz_secret``: ``AuthorSession.schema`` (and its repr) showed
    ``Enum(categories=[..., 'zz_secret'])``, and so did a key-type refusal's message.
    """
    views = []
    for extra in ([], ["zz_secret"]):
        vals = ["a", "b", "a", *extra]
        enum = pl.Enum(sorted(set(vals)))  # the categories the data holds
        df = pl.DataFrame({"c": pl.Series(vals, dtype=enum if not declared else pl.String),
                           "l": pl.Series([[v] for v in vals], dtype=pl.List(enum)),
                           "x": [1.0, 2.0, 3.0, 4.0][:len(vals)]})
        cur = tabdp.Curator(seed=1)
        cur.add("d", df, schema={"c": enum, "l": pl.List(enum), "x": "Float64"}
                if declared else None)
        author = cur.author_session("d")
        views.append([author.schema, repr(author),
                      author_view(lambda a=author: a.sum(
                          "x", by="c", keys=tabdp.KeySet.from_dict(c=[1, 2]),
                          mechanism=mech.Gaussian(5.0), nulls="zero", negatives="allow")),
                      *[author_view(call) for call in _releases(author)]])
    assert "zz_secret" not in repr(views[1])
    assert views[0] == views[1]


# origin: review rev65x
def test_a_column_held_twice_is_not_said_to_be_in_no_file(tmp_path: Path) -> None:
    """A path dataset whose only file holds ``x`` twice: the curator was told ``x`` is absent.

    Such a column is read as nulls in that file (review rev65p), but the curator's warning
    said it was "in none of its files" (the file's schema listed the names held once only).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "ds"
    folder.mkdir()
    pq.write_table(pa.table([pa.array(["a"]), pa.array([1.0]), pa.array([9.0])],
                            names=["c", "x", "x"]), folder / "b.parquet")
    cur = tabdp.Curator(seed=1)
    cur.add("d", folder, schema={"c": "String", "x": "Float64"})
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        cur.author_session("d")
    texts = [str(w.message) for w in got]
    assert not any("in none of its files" in t for t in texts), texts
    assert any("{'x': 1}" in t for t in texts), texts  # its value is null there, counted
