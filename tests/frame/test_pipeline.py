"""The one release pipeline (issue 29, item 1): the filter, the backend decision, the protocol.

* `individual_filter` is one pure function: Session.admit is a wrapper over it, and its
  decisions are checked here on constant, curve and capped budgets (NaN never admitted);
* one module decides the backend (`tabdp.frame.backends`): the other modules of the engine
  layer do not test frame classes themselves;
* no stand-in objects (``SimpleNamespace``) pretend to be a Session;
* every Polars release runs through `tabdp.frame.pipeline.execute` over a `Backend`, with the
  tables and losses the accessor gives.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import polars as pl
import pytest

import tabdp
from tabdp.frame import backends
from tabdp.frame.backends.base import Backend
from tabdp.frame.backends.polars import MemoryBackend, StreamingBackend
from tabdp.frame.pipeline import (
    execute,
    execute_all,
    execute_quantile,
    plan,
    plan_quantile,
    polars_backend,
    quantile_backend,
)
from tabdp.privacy.budget import Budget
from tabdp.privacy.filter import constant_admits, individual_filter, prior_columns
from tabdp.privacy.ledger import Charges

ROOT = Path(__file__).resolve().parents[2] / "tabdp"
KEYS = tabdp.KeySet.from_dict(c=["a", "b", "z"])
DF = pl.DataFrame({"c": ["a", "b", "b", "a", "q"], "x": [1.0, 2.0, 30.0, 4.0, 5.0]})


def _charges(rho: dict[str, list[float]], size: dict[str, list[float]]) -> Charges:
    n = len(next(iter(rho.values())))
    return Charges(np.arange(n), {c: np.array(v) for c, v in rho.items()},
                   {c: np.full(n, np.inf) for c in rho},
                   {c: np.array(v) for c, v in size.items()})


# -- the individual filter ----------------------------------------------------------------------
def test_constant_budget_sums_currencies_and_prior() -> None:
    ch = _charges({"x": [0.25, 0.5, np.nan], "y": [0.25, 0.25, 0.0]},
                  {"x": [1.0, 1.0, 1.0], "y": [1.0, 1.0, 1.0]})
    got = individual_filter(Budget(1.0), ch, {"rho": np.array([0.5, 0.5, 0.0])})
    # 0.5 + 0.25 + 0.25 = 1.0 is within (no slack); 0.5 + 0.75 is not; NaN never is
    assert got["x"].tolist() == [True, False, False]
    assert got["y"].tolist() == got["x"].tolist()
    assert prior_columns(Budget(1.0), ["x", "y"]) == ["rho"]


def test_curve_budget_uses_the_largest_size_so_far() -> None:
    b = Budget({"x": {1.0: 1.0, 100.0: 2.0}})
    ch = _charges({"x": [0.9, 0.9]}, {"x": [1.0, 1.0]})
    prior = {"rho@x": np.array([0.5, 0.5]), "size@x": np.array([1.0, 100.0]),
             "rho": np.array([0.5, 0.5])}
    got = individual_filter(b, ch, prior)
    # unit 0: 1.4 > limit(1) = 1; unit 1: its size so far is 100, 1.4 <= 2
    assert got["x"].tolist() == [False, True]
    assert prior_columns(b, ["x"]) == ["rho@x", "size@x", "rho"]


def test_total_cap_admits_currencies_in_query_order() -> None:
    b = Budget({"x": {1.0: 10.0}, "y": {1.0: 10.0}}, total=1.0)
    ch = _charges({"x": [0.5, 0.75], "y": [0.5, 0.5]}, {"x": [1.0, 1.0], "y": [1.0, 1.0]})
    zeros = np.zeros(2)
    prior = {"rho@x": zeros, "size@x": zeros, "rho@y": zeros, "size@y": zeros, "rho": zeros}
    got = individual_filter(b, ch, prior)
    # unit 0: 0.5 + 0.5 = 1.0 is above the cap checked 4 ulps inside: y is left out
    assert got["x"].tolist() == [True, True]
    assert got["y"].tolist() == [False, False]


def test_no_budget_admits_everyone_without_reading_the_ledger() -> None:
    def prior(units: Any, cols: list[str]) -> dict[str, np.ndarray]:
        raise AssertionError("read")

    ch = _charges({"rows": [5.0, 7.0]}, {"rows": [1.0, 1.0]})
    assert individual_filter(None, ch, prior)["rows"].tolist() == [True, True]


def test_session_admit_is_the_filter_over_its_ledger() -> None:
    s = tabdp.Session(budget=1.0)
    ch = _charges({"x": [0.5, 2.0]}, {"x": [1.0, 4.0]})
    assert s.admit(ch)["x"].tolist() == individual_filter(
        s.budget, ch, {"rho": np.zeros(2)})["x"].tolist() == [True, False]
    seen: list[list[str]] = []

    def lookup(units: Any, cols: list[str]) -> dict[str, np.ndarray]:
        seen.append(cols)
        return {c: np.array([0.75, 0.0]) for c in cols}

    assert s.admit(ch, lookup)["x"].tolist() == [False, False]
    assert seen == [["rho"]]


def test_constant_admits_is_generic() -> None:
    class Col:  # any type with + - * > <= and a `where` (a Spark column; here a boxed float)
        def __init__(self, v: float) -> None:
            self.v = v

        def __add__(self, other: Col) -> Col:
            return Col(self.v + other.v)

        def __sub__(self, other: Col) -> Col:
            return Col(self.v - other.v)

        def __mul__(self, other: float) -> Col:
            return Col(self.v * other)

        def __gt__(self, other: float) -> bool:
            return self.v > other

        def __le__(self, other: float) -> bool:
            return self.v <= other

    def where(c: bool, x: Col, y: Col) -> Col:
        return x if c else y

    # inexact additions (rounded up) at the limit: the boxed type decides as numpy does
    for r0, r1, led, limit in [(0.5, 2.0**-60, 0.5, 1.0), (0.25, 0.25, 0.5, 1.0),
                               (0.1, 0.2, 0.7, 1.0), (0.5, 0.25, 0.5, 1.0)]:
        got = constant_admits(limit, [Col(r0), Col(r1)], Col(led), Col(0.0), where)
        want = constant_admits(limit, [np.array([r0]), np.array([r1])], np.array([led]),
                               np.zeros(1))
        assert got == bool(want[0]), (r0, r1, led)
    # 0.5 + 2**-60 + 0.5 is above 1 exactly: refused although fl() gives 1.0
    assert not constant_admits(1.0, [Col(0.5), Col(2.0**-60)], Col(0.5), Col(0.0), where)


# -- one module decides the backend ----------------------------------------------------------------
def test_the_backend_decision() -> None:
    s = tabdp.Session()
    assert backends.release_engine(pl.LazyFrame(), s) == "streaming"
    assert backends.release_engine(pl.DataFrame(), s) == "memory"
    assert backends.release_engine(pd.DataFrame(), None) == "memory"
    assert backends.release_engine(pl.LazyFrame(), tabdp.Session(unit="id")) == "memory"
    assert backends.release_engine(pl.LazyFrame(), tabdp.Session(streaming=False)) == "memory"
    assert backends.frame_kind(pd.DataFrame()) == "pandas"
    assert backends.frame_kind([1]) is None
    assert backends.output_library(pl.LazyFrame()) == "polars"


def _source(rel: str) -> str:
    return (ROOT / rel).read_text()


#: The modules of the engine layer that once decided the backend themselves.
ASKERS = ["frame/accessor.py", "frame/_requests.py", "privacy/session.py", "frame/_release.py",
          "frame/pipeline.py"]


@pytest.mark.parametrize("rel", ASKERS)
def test_only_the_backends_module_tests_frame_classes(rel: str) -> None:
    tree = ast.parse(_source(rel))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "isinstance" and len(node.args) == 2:
            text = ast.unparse(node.args[1])
            # (a report's own table may be checked: the input frames are not)
            assert not any(t in text for t in ("LazyFrame", "pd.DataFrame")), \
                f"{rel}:{node.lineno} decides the backend itself: {ast.unparse(node)}"
        if isinstance(node, ast.Name) and node.id == "is_spark_frame":
            raise AssertionError(f"{rel}:{node.lineno} decides the backend itself")


def test_no_stand_in_sessions() -> None:
    for path in [*ROOT.joinpath("frame").rglob("*.py"), *ROOT.joinpath("privacy").rglob("*.py")]:
        assert "SimpleNamespace" not in path.read_text(), path


@pytest.mark.parametrize("rel", ["privacy/ledger.py", "privacy/filter.py",
                                 "release/_spark_run.py", "frame/_engine.py", "frame/_spark.py",
                                 "frame/_release.py", "frame/pipeline.py",
                                 "frame/backends/__init__.py", "frame/backends/base.py",
                                 "frame/backends/polars.py", "frame/backends/spark.py"])
def test_no_private_module_of_another_package(rel: str) -> None:
    own = "tabdp." + ".".join(Path(rel).parent.parts)
    for node in ast.walk(ast.parse(_source(rel))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tabdp."):
            parts = node.module.split(".")
            private = [i for i, p in enumerate(parts) if p.startswith("_") and i > 1]
            if private:
                pkg = ".".join(parts[:private[0]])
                assert own == pkg or own.startswith(pkg + "."), \
                    f"{rel}:{node.lineno} imports {node.module}"


# -- the pipeline ---------------------------------------------------------------------------------
def test_backends_implement_the_protocol() -> None:
    assert isinstance(MemoryBackend(), Backend)
    assert isinstance(StreamingBackend([]), Backend)


@pytest.mark.parametrize("frame", ["eager", "lazy", "pandas"])
@pytest.mark.parametrize("budget", [None, 0.3])
def test_execute_equals_the_accessor(frame: str, budget: float | None) -> None:
    native: Any = {"eager": DF, "lazy": DF.lazy(), "pandas": DF.to_pandas()}[frame]
    mech = tabdp.mechanisms.Gaussian(2.0)

    def run(direct: bool) -> tuple[Any, Any, str]:
        s = tabdp.Session(seed=7, budget=budget)
        if direct:
            rel = plan(native, s, kind="sum", measures="x", by="c", keys=KEYS, mechanism=mech,
                       negatives="allow", grid=None)
            backend = polars_backend([rel])
            out = execute(rel, backend)
        else:
            out = native.dp.sum("x", by="c", keys=KEYS, mechanism=mech, session=s,
                                negatives="allow")
            backend = polars_backend([])
        return out, s.report().per_record, type(backend).__name__

    (a, ra, kind), (b, rb, _) = run(True), run(False)
    if frame == "pandas":
        pd.testing.assert_frame_equal(a, b)
    else:
        assert a.equals(b)
    assert ra.equals(rb)
    assert kind == ("StreamingBackend" if frame == "lazy" else "MemoryBackend")
    rho = ra["rho"].to_numpy()
    # x**2 / 8 per row (the row outside the key set pays nothing); a budget of 0.3 leaves out
    # every row above it
    full = np.array([1.0, 4.0, 900.0, 16.0, 0.0]) / 8
    np.testing.assert_array_equal(rho, full if budget is None else np.where(full <= 0.3, full, 0))


@pytest.mark.parametrize("frame", ["eager", "lazy", "pandas"])
@pytest.mark.parametrize("budget", [None, 1.5])
def test_a_median_runs_on_the_pipeline(frame: str, budget: float | None) -> None:
    """plan_quantile + execute_quantile is df.dp.median: the same table, record and losses."""
    native: Any = {"eager": DF, "lazy": DF.lazy(), "pandas": DF.to_pandas()}[frame]

    def run(direct: bool) -> tuple[Any, Any, Any, str]:
        s = tabdp.Session(seed=5, budget=budget)
        args = dict(by="c", keys=KEYS, bounds=(0.0, 10.0), epsilon=1.0)
        if direct:
            rel = plan_quantile(native, s, column="x", q=0.5, median=True, **args)
            backend = quantile_backend(rel)
            out = execute_quantile(rel, backend)
            kind = type(backend).__name__
        else:
            out, kind = native.dp.median("x", session=s, **args), ""
        return out, s.report().per_record, s.records[0].confidential, kind

    (a, ra, ca, kind), (b, rb, cb, _) = run(True), run(False)
    if frame == "pandas":
        pd.testing.assert_frame_equal(a, b)
    else:
        assert a.equals(b)
    assert ra.equals(rb) and ca == cb
    assert kind == ("StreamingBackend" if frame == "lazy" else "MemoryBackend")
    # each row in a cell pays the group-privacy policy at one row; the row outside pays nothing
    assert (ra["epsilon"].to_numpy() > 0).sum() == 4


def test_backends_implement_the_quantile_protocol() -> None:
    for b in (MemoryBackend(), StreamingBackend([])):
        assert callable(b.quantile_data) and callable(b.record_quantile)


def test_execute_all_runs_a_batch_in_order() -> None:
    s = tabdp.Session(seed=3)
    r1 = plan(DF, s, kind="count", by="c", keys=KEYS, name="n1")
    r2 = plan(DF, s, [r1], kind="count", by="c", keys=KEYS, name="n2")
    outs = execute_all([r1, r2])
    assert [r.name for r in s.records] == ["n1", "n2"]
    assert [o.height for o in outs] == [3, 3]
    conf = s.records[0].confidential
    assert conf["rows_read"] == 5 and conf["rows_outside_keys"] == 1
    assert conf["rows_in_released_cells"] == 4


def test_the_release_workflow_releases_through_one_call() -> None:
    """The runner neither picks the engine's release function nor installs its ledger."""
    src = _source("release/_tables.py")
    for name in ("DPAccessor", "execute_planned", "planned_releases", "spark_grouped_release",
                 "SparkReplayLedger", "SparkUnitLedger", "use_engine"):
        assert name not in src, name
    assert src.count("release_requests(") == 1 and "bind_session_engine(" in src
