"""Shared fixtures: every frame test runs over the five engines (input forms) of the accessor.

- ``"pandas"``: a ``pd.DataFrame``;
- ``"polars"``: a ``pl.DataFrame``;
- ``"lazy"``: a ``pl.LazyFrame`` from ``.lazy()`` (the plan holds the data in memory);
- ``"streaming"``: a ``pl.LazyFrame`` from ``pl.scan_parquet`` of a file written to the test's
  ``tmp_path``: an input the caller never materialises;
- ``"spark"``: a PySpark DataFrame (marker ``spark``; the Spark runs of frame tests that check
  no refusal also carry ``slow`` and ``spark_full``, see ``pytest_collection_modifyitems``).

``engine`` is the parametrized fixture; ``as_engine(df, engine, tmp_path)`` converts a frame
(pandas or Polars) to a form and ``as_polars`` normalises any returned frame for comparison.
``backend`` / ``make_frame`` are the older names the frame tests use (same five forms).
"""

from __future__ import annotations

import copy
import inspect
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _engines import ENGINES, as_engine, as_polars, build_frame, spark_session  # noqa: E402

_CACHE_ENV = "TABDP_CACHE_DIR"
_SHARED_ENV = "TABDP_TEST_CACHE_SHARED"  # the run's folder, for pytest-xdist's workers
_CACHE_KEY = pytest.StashKey[tuple[str, "str | None"]]()


def pytest_configure(config: pytest.Config) -> None:
    """Give the whole test run its own empty on-disk table cache (``tabdp._cache``).

    It is removed at the end, so tests never read or write the user's cache. A test that needs
    another folder opts in with ``monkeypatch.setenv("TABDP_CACHE_DIR", ...)``. Under
    ``pytest -n`` (pytest-xdist) the workers share the controller's folder: a table is built
    once per run (the cache is safe for concurrent writers, tests/noise/test_table_cache.py).
    """
    shared = os.environ.get(_SHARED_ENV) if hasattr(config, "workerinput") else None
    if shared:  # a pytest-xdist worker: the controller's folder (the controller removes it)
        config.stash[_CACHE_KEY] = (None, None)
        os.environ[_CACHE_ENV] = shared
        return
    folder = tempfile.mkdtemp(prefix="tabdp-test-cache-")
    config.stash[_CACHE_KEY] = (folder, os.environ.get(_CACHE_ENV))
    os.environ[_CACHE_ENV] = folder
    os.environ[_SHARED_ENV] = folder  # inherited by the workers `pytest -n` starts


def pytest_unconfigure(config: pytest.Config) -> None:
    """Restore ``TABDP_CACHE_DIR`` and remove the run's table cache."""
    folder, old = config.stash.get(_CACHE_KEY, (None, None))
    if folder is None:
        return
    os.environ.pop(_SHARED_ENV, None)
    if old is None:
        os.environ.pop(_CACHE_ENV, None)
    else:
        os.environ[_CACHE_ENV] = old
    shutil.rmtree(folder, ignore_errors=True)

#: The local loop's (``make test-fast``) share of some costly parametrized tests: the test ids
#: listed run in every loop; the test's other parametrizations carry ``slow`` (CI runs them all,
#: ``make test``). Each subset keeps every code path the full set reaches (every engine, every
#: budget form, the edge cases); the rest repeats them on other values. Keys are
#: ``"<path under tests/>::<test name>"``; values the ids in brackets of the test's node id.
FAST_SUBSETS: dict[str, frozenset[str]] = {
    # review R14's neighbouring type edges and partition folders: one of each kind stays fast
    # (a float, a text, a nested type, a unit id; an escaped and a default partition)
    "release/test_author_declared_attacks.py::test_one_record_at_a_type_edge_changes_only_the_noise":
        frozenset({"float_nan", "huge_string", "struct", "unit_null", "timestamp_far"}),
    "release/test_author_declared_attacks.py::test_one_record_alone_in_its_partition_folder":
        frozenset({"state=%30%32/x.parquet", "state=__HIVE_DEFAULT_PARTITION__/x.parquet"}),
    # the float-stored integer leak (issue 27): a missing value and a fraction stay fast; NaN
    # and 2**63 (the same scan, other values) run in CI
    "release/test_author_attacks.py::test_integer_column_stored_as_float_by_one_file":
        frozenset({"a missing value", "a fraction"}),
    # overwrite between authors: the default policy and "never" stay fast
    "release/test_author_attacks.py::test_overwrite_between_authors":
        frozenset({"None", "never"}),
    # native stderr to the confidential folder: the author's run stays fast
    "release/test_author_attacks.py::test_native_stderr_goes_to_the_confidential_folder":
        frozenset({"author"}),
    # seeded reruns: unit mode (the costlier accounting) stays fast; row mode runs in CI
    "release/test_cli.py::test_seeded_runs_reproduce_the_confidential_folder":
        frozenset({"unit"}),
    # 9 frames x 3 reports, each page rendered twice (plots): one row, NaN/null, no rows
    "report/test_confidential_streaming.py::test_lazy_page_equals_eager_page":
        frozenset({"1", "3", "7"}),
    # one moderate law per family (each builds its own certified table: 3-36 s under load);
    # CI checks all 21 shapes (the extremes: t_df0.5, gcauchy_c1.2, subbotin_r20, epl_p2_a1e3)
    "noise/test_certified_tables.py::test_table_internals": frozenset(
        {"gg_p0.5", "gg_p1", "subbotin_r1", "t_df3", "gcauchy_c4", "epl_p1_d4"}),
    # 200 000 cells on the default grid per law (8-14 s each): one law in the loop
    "noise/test_certified_tables.py::test_fallbacks_on_the_default_grid_are_rare":
        frozenset({"gg_p0.5"}),
    # the tabdp side is the same for both methods (the method is tau-argus' option): MOD, the
    # default, in the loop (pytauargus runs ~15 s per method)
    "compare/test_compare.py::test_audit_agrees_with_pytauargus": frozenset({"MOD"}),
    # the SaS certified tables: alpha = 1.5 in the loop; 1.001 and 1.9999 build their own tables
    "noise/test_certified_tables.py::test_sas_table_internals": frozenset({"sas_a1.5"}),
    # 120 values per delta against a 50-digit minimisation; 1e-9 also checks the tightness
    "privacy/test_approx_accounting.py::test_zcdp_epsilon_is_valid_on_a_grid_around_the_zero_crossing":
        frozenset({"1e-09"}),
    # 2 mechanisms x 4 budgets x 4 engines: every budget on the pandas and streaming ledgers
    "frame/test_streaming.py::test_streaming_equals_the_in_memory_ledger": frozenset(
        f"{m}-{b}-{e}" for m in ("pure", "approx") for b in ("none", "constant", "curve",
                                                              "curve-total")
        for e in ("pandas", "streaming")),
    # every engine once, each unit setting twice
    "privacy/test_session.py::test_recorded_loss_matches_neighbouring_datasets": frozenset(
        {"pandas-None", "polars-u", "lazy-u", "streaming-None"}),
    # in memory: every budget; streaming (a Parquet scan per release): no budget and curve+total
    "frame/test_batched.py::test_a_batch_equals_the_releases_one_by_one": frozenset(
        {f"{b}-in-memory" for b in ("none", "constant", "curve", "curve-total")}
        | {"none-streaming", "curve-total-streaming"}),
    # every multiset of up to 4 values on a 5-point grid, plus each added value (24-29 s wall
    # per q under load 13): the median and both extreme ranks stay fast; the interior ranks
    # 0.25 and 0.9 run in CI (the hypothesis test beside it still draws interior q locally)
    "sensitivity/test_smooth_sensitivity.py::"
    "test_properties_hold_for_add_remove_neighbours_exhaustively": frozenset({"0.5", "0.0", "1.0"}),
    # author-mode neighbours: NaN payroll and null id in the loop; negative, huge, inf in CI
    "release/test_cli.py::test_author_mode_neighbours_are_indistinguishable":
        frozenset({"nan-null_id"}),
}


def _fast_subset_key(item: pytest.Item) -> str:
    path = Path(str(item.path))
    parts = path.parts[path.parts.index("tests") + 1:] if "tests" in path.parts else path.parts
    return "/".join(parts) + "::" + getattr(item, "originalname", item.name)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``slow`` what the local loop leaves to CI.

    The parametrizations of a test in :data:`FAST_SUBSETS` outside its subset carry ``slow``.

    Spark runs of the frame suite beyond the default set are marked ``slow`` and ``spark_full``:
    on the ``spark`` engine the default set is the engine equality test and every frame test
    that asserts a refusal (bad input: ``pytest.raises`` in its body); the other frame tests'
    Spark runs and the privacy suite's Spark runs carry ``spark_full``. CI runs them all
    (``make test``); a developer deselects them with ``-m "not spark_full"``.
    """
    seen: dict[str, set[str]] = {}
    for item in items:
        callspec = getattr(item, "callspec", None)
        key = _fast_subset_key(item)
        keep = FAST_SUBSETS.get(key) if callspec is not None else None
        if keep is None:
            continue
        seen.setdefault(key, set()).add(callspec.id)
        if callspec.id not in keep:
            item.add_marker(pytest.mark.slow)
    # a subset naming ids its test no longer has would silently keep nothing in the local loop
    stale = {k: sorted(FAST_SUBSETS[k] - ids) for k, ids in seen.items() if FAST_SUBSETS[k] - ids}
    whole = not config.getoption("-k") and not any("::" in a for a in config.args)
    if stale and whole:  # (node ids or -k given on the command line select fewer ids)
        raise pytest.UsageError(f"tests/conftest.py FAST_SUBSETS names test ids that are no "
                                f"longer collected: {stale}; update it to the test's ids.")
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("engine") != "spark" or not isinstance(item, pytest.Function):
            continue
        path = Path(str(item.path))
        if path.parent.name == "privacy":
            # the privacy suite on Spark (tens of Spark sessions' worth of releases, several
            # hypothesis searches): minutes, run by CI, deselectable locally
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.spark_full)
            continue
        if path.parent.name != "frame" or path.name == "test_engines_equal.py":
            continue
        try:
            body = inspect.getsource(item.function)
        except (OSError, TypeError):
            body = ""
        if "pytest.raises" not in body:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.spark_full)


@pytest.fixture(params=[pytest.param(e, marks=pytest.mark.spark) if e == "spark" else e
                        for e in ENGINES])
def engine(request: pytest.FixtureRequest) -> str:
    """Name of the engine (input form) under test (``"spark"`` starts or skips Spark)."""
    if request.param == "spark":
        request.getfixturevalue("spark")
    return str(request.param)


@pytest.fixture
def backend(engine: str) -> str:
    """The older name of ``engine``."""
    return engine


@pytest.fixture
def to_engine(engine: str, tmp_path: Path) -> Callable[[Any], Any]:
    """``to_engine(df) -> df`` in the form of the engine under test."""

    def convert(df: Any) -> Any:
        return as_engine(df, engine, tmp_path)

    return convert


@pytest.fixture
def make_frame(engine: str, tmp_path: Path) -> Callable[..., Any]:
    """``make_frame(dict, dtypes=None) -> native frame`` of the engine under test."""

    def make(data: Mapping[str, Any], dtypes: Mapping[str, Any] | None = None) -> Any:
        return build_frame(engine, data, dtypes, tmp_path)

    return make


@pytest.fixture
def out_type(engine: str) -> type:
    """The frame type tabdp must return for the engine (pandas → pandas, Polars → eager)."""
    if engine == "spark":
        try:  # PySpark >= 4.0: the classic (non-Connect) DataFrame
            from pyspark.sql.classic.dataframe import DataFrame
        except ImportError:
            from pyspark.sql import DataFrame

        return DataFrame
    return pd.DataFrame if engine == "pandas" else pl.DataFrame




@pytest.fixture
def to_pl() -> Callable[[Any], pl.DataFrame]:
    """Convert a returned frame to Polars."""
    return as_polars


def rng_state(session: Any) -> Any:
    """Snapshot of a seeded session's generator state (to prove no noise was drawn)."""
    return copy.deepcopy(session.rng._gen.bit_generator.state)


@pytest.fixture
def snapshot() -> Callable[[Any], tuple[int, Any]]:
    """``snapshot(session) -> (number of records, generator state)``."""

    def snap(session: Any) -> tuple[int, Any]:
        return len(session.records), rng_state(session)

    return snap


# -- Spark (marker ``spark``; skipped when PySpark or a Java runtime is missing) ---------------
def _java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    return shutil.which("java") is not None or bool(home and os.path.exists(
        os.path.join(home, "bin", "java")))


@pytest.fixture(scope="session")
def spark() -> Any:
    """One local SparkSession for every Spark test (``local[2]``, 2 shuffle partitions, no UI).

    Skips when PySpark is not installed (``pip install tabdp[spark]``) or no ``java`` is found
    (``.ci/java`` installs one). Locally, ``pytest -m "not spark"`` deselects these tests.
    """
    pytest.importorskip("pyspark")
    if not _java_available():
        pytest.skip("no Java runtime (java / $JAVA_HOME) for PySpark; run .ci/java")
    import sys

    # the Python workers must be this interpreter (with tabdp, numpy, pyarrow)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.environ.get("PYTHONPATH", "")
    if root not in path.split(os.pathsep):  # the workers import tabdp from this checkout
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, path) if p)
    session = spark_session()
    yield session
    session.stop()
