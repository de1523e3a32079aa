"""Author mode: what a query author sees does not depend on one record.

Each test runs a release (accessor, CLI or Spark) on neighbouring inputs and requires the same
output, dtypes, grid, errors and budget behaviour (docs/privacy-semantics.md, "The
author/curator boundary"). Tests marked ``xfail(strict=True)`` are attacks that still succeed
(the reason says what is missing). The CLI-only attacks are in tests/release/test_author_attacks.py.
"""

from __future__ import annotations

import io
import json
import pathlib
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest

import tabdp
from tabdp import cli
from tabdp import mechanisms as mech
from tabdp.datasets.synth import generate_establishments

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from _engines import as_polars  # noqa: E402
from _specs import author_input  # noqa: E402

KEY1 = tabdp.KeySet.from_dict(c=["a"])


# -- 3. Unit mode: unit ids come from the caller's frame ----------------------------------------
def test_author_mode_budget_survives_relabelled_ids(to_engine: Callable[[Any], Any]) -> None:
    """Fixed.

    An author-mode session releases only its bound frame (by identity), so ids cannot be relabelled
    between releases; the second release of the bound frame is filtered.
    """
    data = pl.DataFrame({"id": [1, 2], "c": ["a", "a"], "x": [1.0, 0.1]})
    df = to_engine(data)
    budget = 0.6
    s = tabdp.Session(unit="id", mode="author", budget=budget, seed=1, data=df)
    df.dp.sum("x", by="c", keys=KEY1, mechanism=mech.Gaussian(1.0), session=s, nulls="zero",
              negatives="allow")
    with pytest.raises(tabdp.exceptions.InvalidParameterError, match="bound to one frame"):
        (to_engine(data.with_columns(pl.col("id") + 1000))
         .dp.sum("x", by="c", keys=KEY1, mechanism=mech.Gaussian(1.0), session=s,
                 nulls="zero", negatives="allow"))
    df.dp.sum("x", by="c", keys=KEY1, mechanism=mech.Gaussian(1.0), session=s, nulls="zero",
              negatives="allow")
    pr = as_polars(s.report().per_record).sort("id")
    assert pr["rho"].to_list() == [0.5, pytest.approx(0.01)]
    assert pr["rho"].max() <= budget


# -- 6. Author mode: frames built by the caller can fail on data ---------------------------------
def _author_sees(frame, **kw) -> str:
    try:
        frame.dp.sum("x", by="c", keys=KEY1, mechanism=mech.Gaussian(1.0),
                     session=tabdp.Session(mode="author"), nulls="zero", **kw)
    except Exception as err:  # noqa: BLE001 - what the author sees
        return f"{type(err).__name__}: {err}"
    return "ok"


# origin: review R1 (issue 13)
@pytest.mark.xfail(strict=True, reason="R1: a LazyFrame plan built by the author (a strict cast) "
                   "fails iff a value is out of range, and Polars' message quotes the value. "
                   "Outside the documented model: an author-mode session's frame is the "
                   "curator's (docs/privacy-semantics.md), never one the author builds")
def test_author_mode_lazy_plan_is_no_oracle() -> None:
    def lazy(v: int) -> pl.LazyFrame:
        return (pl.DataFrame({"c": ["a", "a"], "x": [1, v]}).lazy()
                .with_columns(pl.col("x").cast(pl.UInt8)))

    # D: "ok"; D with one record of 300: "InvalidOperationError: ... values: [300] ..."
    assert _author_sees(lazy(5)) == _author_sees(lazy(300))


# origin: review R1 (issue 13); fixed (review r56): a bare author-mode session refuses to bind a
# pandas frame inside a release, whatever its data (the curator pins it: data= or Curator)
def test_author_mode_pandas_object_column_is_no_oracle() -> None:
    import pandas as pd

    def frame(v: object) -> pd.DataFrame:
        return pd.DataFrame({"c": ["a", "a"], "x": pd.Series([1.0, v], dtype=object)})

    seen = _author_sees(frame(5.0))
    assert seen == _author_sees(frame("n/a"))
    assert seen.startswith("InvalidParameterError") and "pandas" in seen


def test_a_bare_author_session_refuses_a_pandas_unit_of_mixed_types() -> None:
    # review r56: one unit id of another type (a str among ints in an object column) turned
    # every release into DataFailure; refused before any data, whatever the ids
    import pandas as pd

    keys = tabdp.KeySet.from_dict(k=["a", "b"])
    seen = []
    for firm in ([1, 2, 3, 4], [1, 2, 3, "4"]):
        pdf = pd.DataFrame({"firm": pd.Series(firm, dtype=object), "k": ["a", "a", "b", "b"]})
        with pytest.raises(tabdp.InvalidParameterError) as info:
            pdf.dp.count(by="k", keys=keys, session=tabdp.Session(unit="firm", mode="author"))
        seen.append(str(info.value))
    assert seen[0] == seen[1]
    # a subclass of pandas' DataFrame too (review r58: the check read the class's module)
    class MyFrame(pd.DataFrame):
        pass

    sub = MyFrame({"firm": pd.Series([1, 2], dtype=object), "k": ["a", "b"]})
    with pytest.raises(tabdp.InvalidParameterError) as info:
        sub.dp.count(by="k", keys=keys, session=tabdp.Session(unit="firm", mode="author"))
    assert str(info.value) == seen[0]
    # pinned by the curator's own call instead: a plain DataValidationError, the cause chained
    pdf = pd.DataFrame({"firm": pd.Series([1, 2, 3, "4"], dtype=object), "k": ["a"] * 4})
    with pytest.raises(tabdp.exceptions.DataValidationError, match="could not be pinned"):
        tabdp.Session(unit="firm", mode="author", data=pdf)


KEY_A = tabdp.KeySet.from_dict(c=["A"])


KEY_AB = tabdp.KeySet.from_dict(c=["a", "b"])


# origin: review R2
@pytest.mark.parametrize("secret_first", [True, False])
def test_author_mode_categorical_key_codes_do_not_follow_the_data(secret_first: bool) -> None:
    """Author mode: a Polars Categorical key comes back with data-free codes.

    A Categorical's physical codes come from the process-wide map in insertion order; without
    the fix the output key ``A`` had code 1 when a record outside the key set (value
    ``zz_secret_r2``, seen first) existed and 0 without it.
    """
    vals = ["zz_secret_r2", "A"] if secret_first else ["A", "A"]
    df = pl.DataFrame({"c": pl.Series(vals, dtype=pl.Categorical), "x": [1.0, 2.0]})
    s = tabdp.Session(mode="author", data=df, seed=1)
    out = df.dp.sum("x", by="c", keys=KEY_A, mechanism=mech.Gaussian(1.0), session=s,
                    nulls="zero", negatives="allow")
    assert out.schema["c"] == pl.Enum(["A"])
    assert out["c"].to_physical().to_list() == [0]


# origin: review R2
def test_author_mode_pandas_null_does_not_change_output_dtype_or_grid() -> None:
    """Neighbouring pandas frames: D = {1, 2}, D' = D + one record whose x is null (zero)."""
    seen = []
    for xs in ([1, 2], [1, 2, None]):
        df = pd.DataFrame({"c": ["A"] * len(xs), "x": xs})
        s = tabdp.Session(mode="author", data=df, seed=1)
        out = df.dp.sum("x", by="c", keys=KEY_A, mechanism=mech.Gaussian(5.0), session=s,
                        nulls="zero", negatives="allow")
        seen.append((str(out["x"].dtype), s.report().to_dict()["queries"][0]["grid"]))
    assert seen[0] == seen[1]


_AUTHOR_SPEC = """
[release]
name = "coverage"
""" + author_input("payroll = [0, 1e9]", negatives="allow", template=True) + """[domains]
state = ["01", "02"]
naics2 = ["77"]
[randomness]
seed = 7
[[tables]]
name = "by_state"
measures = ["payroll"]
by = ["state"]
mechanism = {{ family = "gaussian", sigma = 1e5 }}
[[tables]]
name = "by_naics"
kind = "count"
by = ["naics2"]
"""


# origin: review R2
def test_author_mode_cli_run_sees_nothing_of_a_record_outside_the_keys(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Author-mode CLI run on D and on D + one record outside every key set (same seed).

    The record is released nowhere, so exit code, stdout, stderr (progress lines without their
    timings; no coverage warning), public file names and bytes (but the manifest's creation
    time) must all be the same.
    """
    df = generate_establishments(300, seed=5).filter(pl.col("state").is_in(["01", "02"]))
    extra = df.head(1).with_columns(pl.lit("99").alias("state"), pl.lit("99").alias("naics2"),
                                    (pl.col("estab_id") + 10**6).alias("estab_id"))
    seen = []
    for i, d in enumerate((df, pl.concat([df, extra]))):
        folder = tmp_path / f"run{i}"
        folder.mkdir()
        monkeypatch.chdir(folder)  # the manifest names the spec's (relative) paths
        d.write_parquet(folder / "d.parquet")
        spec = folder / "s.toml"
        spec.write_text(_AUTHOR_SPEC.format())
        _curator(folder, "d.parquet")
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(["run", str(spec), "--test-seed", "--curator", "curator.toml"],
                        stdout=out, stderr=err)
        public = {p.name: p.read_bytes()
                  for p in sorted((folder / "out" / "coverage" / "public").iterdir())}
        manifest = json.loads(public.pop("manifest.json"))
        manifest.pop("created")
        seen.append((code, out.getvalue().replace(str(folder), "F"),
                     re.sub(r"\(\d+\.\d+s\)", "", err.getvalue().replace(str(folder), "F")),
                     public, manifest))
    assert seen[0][0] == 0
    assert "WARNING (curator" not in seen[1][2]
    assert seen[0] == seen[1]


def _to_pl(frame: Any) -> pl.DataFrame:
    if isinstance(frame, pl.DataFrame):
        return frame
    if hasattr(frame, "toArrow"):  # PySpark >= 4.0
        return pl.from_arrow(frame.toArrow())
    return pl.from_pandas(frame.toPandas())


# origin: review R2
@pytest.mark.spark
def test_spark_author_mode_bad_values_and_budget_equal_polars(spark: Any) -> None:
    """Author mode, row mode, a budget: ±inf, a huge value, a null, a negative, a key outside.

    Spark raises nothing on the data (every rule declared) and gives Polars' tables and
    per-record losses bit for bit; brute force: row 5 (a, x = -3, n = 6) pays 3²/2 + 1/8 +
    6²/8; row 2 (x = 1e300, clamped to 2**64) passes the budget in the first sum and is left
    out of it; row 3 (outside the keys) pays nothing.
    """
    d = pl.DataFrame({"c": ["a", "a", "b", "z", "b", "a"],
                      "x": [1.0, float("inf"), 1e300, 5.0, None, -3.0],
                      "n": [1, 2, 3, 4, 5, 6]})
    seen = {}
    for engine in ("polars", "spark"):
        f = d if engine == "polars" else spark.createDataFrame(d.to_pandas())
        s = tabdp.Session(mode="author", data=f, seed=3, budget=30.0)
        outs = [f.dp.sum("x", by="c", keys=KEY_AB, mechanism=mech.Gaussian(1.0), session=s,
                         nulls="zero", negatives="allow"),
                f.dp.count(by="c", keys=KEY_AB, session=s),
                f.dp.sum("n", by="c", keys=KEY_AB, mechanism=mech.Gaussian(2.0), session=s,
                         nulls="drop", negatives="allow")]
        pr = _to_pl(s.report().per_record)
        seen[engine] = ([_to_pl(o) for o in outs], pr.sort(pr.columns[0]))
    for a, b in zip(seen["polars"][0], seen["spark"][0], strict=True):
        assert a.equals(b), (a, b)
    pr = seen["spark"][1]
    assert pr.equals(seen["polars"][1])
    assert pr["rho_q1_sum"].to_list() == [0.5, 0.0, 0.0, 0.0, 0.0, 4.5]
    assert pr["rho"].to_list() == [0.75, 0.625, 1.25, 0.0, 3.25, 9.125]


def _curator(folder: Path, data: str) -> None:
    """The curator configuration: dataset ``d`` at ``data``, outputs under ``out``."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from _curator import write_curator

    write_curator(folder, {"d": data}, root="out")  # the schema the files imply


# origin: review R2
def test_author_mode_input_path_existence_is_no_oracle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Neighbouring hive datasets: D (states 01, 02) and D + one establishment in state 99.

    An author-mode spec names no path at all (issue 27): a partition folder, written as a path
    or as a glob, is refused from the text, with the same bytes on both datasets.
    """
    df = generate_establishments(100, seed=5).filter(pl.col("state").is_in(["01", "02"]))
    extra = df.head(1).with_columns(pl.lit("99").alias("state"),
                                    (pl.col("estab_id") + 10**6).alias("estab_id"))
    codes = []
    for i, d in enumerate((df, pl.concat([df, extra]))):
        folder = tmp_path / f"run{i}"
        folder.mkdir()
        monkeypatch.chdir(folder)
        d.write_parquet("d", partition_by="state")
        _curator(folder, "d")
        for path in ("d/state=99/*.parquet", "d/state?99/*", "d/*99/*"):
            spec = folder / "s.toml"
            spec.write_text(_AUTHOR_SPEC.format().replace('dataset = "d"', f'path = "{path}"'))
            out, err = io.StringIO(), io.StringIO()
            code = cli.main(["validate", "s.toml", "--curator", "curator.toml"], stdout=out,
                            stderr=err)
            codes.append((path, code, out.getvalue(), err.getvalue()))
    assert codes[:3] == codes[3:]
    assert {c[1] for c in codes} == {2}


def author_view(run: Any) -> tuple[Any, ...]:
    """What the author sees of ``run()``: the table's non-noise part or the error, warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = run()
            got: Any = ("ok", tuple(out.columns), tuple(str(t) for t in out.dtypes),
                        out.select("k").rows(), out.height)
        except Exception as err:  # noqa: BLE001 - what the author sees
            got = ("raised", type(err).__name__, str(err))
    return got, tuple((w.category.__name__, str(w.message)) for w in caught)


# origin: review R17
def test_author_view_of_sum_then_count_is_the_same_on_neighbours() -> None:
    rng = np.random.default_rng(8)
    n = 300
    base = pl.DataFrame({"u": rng.integers(0, 40, n), "k": rng.choice(["a", "b", "c"], n),
                         "x": rng.normal(0, 5, n)})
    extra = pl.DataFrame({"u": [999] * 4, "k": ["a", "b", "a", "zz"],
                          "x": [1e9, -3.0, None, 7.0]})
    keys = tabdp.KeySet.from_dict(k=["a", "b", "c"])
    no_id = pl.DataFrame({"u": pl.Series([None, None], dtype=pl.Int64), "k": ["a", "c"],
                          "x": [1e12, -4.0]})     # rows without a unit id: dropped
    views = []
    for df in (base, pl.concat([base, extra]), pl.concat([no_id, base, no_id])):
        cur = tabdp.Curator(budget=2.0, seed=4)
        cur.add("d", df, unit="u")
        author = cur.author_session("d")
        calls = [
            lambda a=author: a.sum("x", by="k", keys=keys, mechanism=mech.Gaussian(3.0),
                                   nulls="zero", negatives="allow", max_cells=2),
            lambda a=author: a.count(by="k", keys=keys),
            lambda a=author: a.sum("x", by="k", keys=keys, mechanism=mech.Gaussian(3.0),
                                   nulls="zero", negatives="allow"),
            lambda a=author: a.summary(),
        ]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            views.append([author_view(c) for c in calls[:3]])
            summary = author.summary()
        views[-1].append(_public_summary(summary))
    assert views[0] == views[1] == views[2]


def _public_summary(summary: dict[str, Any]) -> Any:
    """The summary without times (timing is outside the guarantee)."""
    def strip(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items()
                    if "time" not in k and "seconds" not in k and k not in ("created", "id")}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v
    return strip(summary)


# origin: review of stop 62 (warnings channel): Python's warning handler is one per process
def test_author_release_does_not_collect_other_threads_warnings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A warning given on another thread while an author's release runs is not the author's.

    The curator pins a dataset (its own call, on its own thread) while an author's release is
    before its data phase: the curator's warning, which holds CONFIDENTIAL counts of the
    other dataset, was collected by the author's release and shown to the author.
    """
    import threading

    import tabdp.frame.accessor as accessor

    cur = tabdp.Curator(seed=1)
    cur.add("d", pl.DataFrame({"c": ["a", "b"], "x": [1.0, 2.0]}))
    cur.add("secret", pl.DataFrame({"c": ["a", "b"], "n": [1.0, 2.5]}),
            schema={"c": "String", "n": "Int64"})   # 2.5: made null, counted in a warning
    author = cur.author_session("d")
    entered, go = threading.Event(), threading.Event()
    check = accessor.check_api_grid

    def paused(*args: Any, **kwargs: Any) -> Any:   # a data-free check of the release
        entered.set()
        go.wait(30)
        return check(*args, **kwargs)

    monkeypatch.setattr(accessor, "check_api_grid", paused)
    seen: list[str] = []

    def release() -> None:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            author.sum("x", by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
                       mechanism=mech.Gaussian(1.0), nulls="zero", negatives="allow")
        seen.extend(str(w.message) for w in caught)

    thread = threading.Thread(target=release)
    thread.start()
    try:
        assert entered.wait(30)
        cur.author_session("secret")   # the curator's call: warns of the values made null
    finally:
        go.set()
        thread.join(60)
    assert not thread.is_alive()
    assert not any("secret" in text or "count by column" in text for text in seen), seen


def test_author_call_handler_left_in_place_passes_warnings_on() -> None:
    """A release's warning handler that outlives it passes later warnings on.

    ``catch_warnings`` of two threads that overlap restore each other's handler: the release's
    could stay in place after it returned, and it kept every later warning of its thread
    (collected for a call that was over: lost).
    """
    from tabdp.frame._author import author_call

    handlers: list[Any] = []

    def call() -> int:
        handlers.append(warnings.showwarning)
        return 1

    got: list[str] = []
    with warnings.catch_warnings():
        warnings.showwarning = lambda message, *args, **kwargs: got.append(str(message))
        assert author_call(tabdp.Session(mode="author", seed=1), None, call) == 1
        handlers[0](UserWarning("later"), UserWarning, "x.py", 1)   # left in place
    assert got == ["later"]


def _with_locals(err: BaseException) -> str:
    """``err`` as a traceback shown with every frame's variables (IPython verbose, rich...)."""
    import traceback

    return "".join(traceback.TracebackException.from_exception(
        err, capture_locals=True).format())


# origin: review of stop 62 (exception channel)
def test_author_refusal_traceback_holds_no_frame_of_the_data() -> None:
    """A data-free refusal shown with its frames' variables does not print the pinned data.

    The refusal was raised with the traceback of the frames it came from, whose variables
    hold the curator's pinned frame: ``repr`` of a Polars frame prints its rows.
    """
    cur = tabdp.Curator(seed=1)
    cur.add("d", pl.DataFrame({"c": ["a", "b"], "x": [123456.789, 2.0]}))
    author = cur.author_session("d")
    keys = tabdp.KeySet.from_dict(c=["a", "b"])
    with pytest.raises(tabdp.ColumnNotFoundError) as info:
        author.sum("nope", by="c", keys=keys, mechanism=mech.Gaussian(1.0), nulls="zero",
                   negatives="allow")
    text = _with_locals(info.value)
    assert "nope" in text and "123456" not in text and "shape:" not in text
    with pytest.raises(tabdp.InvalidParameterError) as info2:
        author.median("x", by="c", keys=keys, bounds=(5.0, 1.0), epsilon=1.0, nulls="drop")
    text = _with_locals(info2.value)
    assert "123456" not in text


def test_author_data_failure_traceback_holds_no_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    """``DataFailure`` shown with its frames' variables does not print the confidential cause."""
    import tabdp.frame.accessor as accessor
    from tabdp.frame import binding

    def failing(*args: Any, session: Any = None, **kwargs: Any) -> Any:
        binding.phase(session, "q1_sum", "reading and aggregating the input")
        raise RuntimeError("value SECRET-7 cannot be parsed")

    monkeypatch.setattr(accessor, "release_grouped", failing)
    cur = tabdp.Curator(seed=1)
    cur.add("d", pl.DataFrame({"c": ["a", "b"], "x": [1.0, 2.0]}))
    author = cur.author_session("d")
    with pytest.raises(tabdp.DataFailure) as info:
        author.sum("x", by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
                   mechanism=mech.Gaussian(1.0), nulls="zero", negatives="allow")
    shown = _with_locals(info.value)   # (before any literal of the assert is a variable)
    assert "SECRET" not in shown
    failures = cur.report(author.name).confidential_summary()["author_failures"]
    assert "SECRET-7" in failures[0]["error"]   # the curator still has it


# origin: review rev62d of stop 62 (warnings channel, overlapping releases)
def test_data_phase_warning_not_shown_when_another_release_ends_first() -> None:
    """Two author releases on two threads; the first ends while the second reads its data.

    The release swapped its own handler into ``warnings.showwarning`` inside
    ``catch_warnings``: the first release's exit put back the handler of before both, while
    the second still ran, so a warning the second gave while reading its data (it may depend
    on the data) reached the process's handler (the terminal).
    """
    import threading

    from tabdp.frame import binding
    from tabdp.frame._author import author_call

    got: list[str] = []
    sa, sb = tabdp.Session(mode="author", seed=1), tabdp.Session(mode="author", seed=2)
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def call_a() -> int:
        a_in.set()
        assert b_in.wait(30)
        return 1

    def call_b() -> int:
        b_in.set()
        assert a_out.wait(30)
        binding.phase(sb, "q1_sum", "reading and aggregating the input")
        warnings.warn("DATA-DEPENDENT 77", UserWarning, stacklevel=1)
        return 2

    def run_a() -> None:
        author_call(sa, None, call_a)
        a_out.set()

    def run_b() -> None:
        assert a_in.wait(30)
        author_call(sb, None, call_b)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *args, **kwargs: got.append(str(message))
        threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        warnings.warn("after both", UserWarning, stacklevel=1)   # passes as before
    assert not any(t.is_alive() for t in threads)
    assert got == ["after both"], got
