"""Shared fixtures: every frame test runs over pandas, Polars eager and Polars lazy."""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd
import polars as pl
import pytest

BACKENDS = ("pandas", "polars", "polars_lazy")

_CACHE_ENV = "TABDP_CACHE_DIR"
_CACHE_KEY = pytest.StashKey[tuple[str, "str | None"]]()


def pytest_configure(config: pytest.Config) -> None:
    """Give the whole test run its own empty on-disk table cache (``tabdp._cache``).

    It is removed at the end, so tests never read or write the user's cache. A test that needs
    another folder opts in with ``monkeypatch.setenv("TABDP_CACHE_DIR", ...)``.
    """
    folder = tempfile.mkdtemp(prefix="tabdp-test-cache-")
    config.stash[_CACHE_KEY] = (folder, os.environ.get(_CACHE_ENV))
    os.environ[_CACHE_ENV] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    """Restore ``TABDP_CACHE_DIR`` and remove the run's table cache."""
    folder, old = config.stash.get(_CACHE_KEY, (None, None))
    if folder is None:
        return
    if old is None:
        os.environ.pop(_CACHE_ENV, None)
    else:
        os.environ[_CACHE_ENV] = old
    shutil.rmtree(folder, ignore_errors=True)

# Polars dtype overrides and their pandas equivalents (for ``make_frame(..., dtypes=...)``).
_PANDAS_DTYPES = {
    pl.Categorical: "category",
    pl.Int32: "int32",
    pl.Int64: "int64",
    pl.Float64: "float64",
    # pandas 3's default text dtype; pandas 2's astype("str") would turn None into "None"
    pl.String: "str" if int(pd.__version__.split(".")[0]) >= 3 else "string",
}


def build_frame(backend: str, data: Mapping[str, Any],
                dtypes: Mapping[str, Any] | None = None) -> Any:
    """A native frame of ``backend`` holding ``data`` (columns → lists)."""
    dtypes = dict(dtypes or {})
    if backend == "pandas":
        df = pd.DataFrame({k: list(v) for k, v in data.items()})
        if dtypes:
            df = df.astype({k: _PANDAS_DTYPES[v] for k, v in dtypes.items()})
        return df
    df = pl.DataFrame(dict(data), schema_overrides=dtypes, strict=False)
    return df.lazy() if backend == "polars_lazy" else df


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Name of the dataframe backend under test."""
    return request.param


@pytest.fixture
def make_frame(backend: str) -> Callable[..., Any]:
    """``make_frame(dict, dtypes=None) -> native frame`` of the backend under test."""

    def make(data: Mapping[str, Any], dtypes: Mapping[str, Any] | None = None) -> Any:
        return build_frame(backend, data, dtypes)

    return make


@pytest.fixture
def out_type(backend: str) -> type:
    """The frame type tabdp must return for the backend (pandas → pandas, Polars → eager)."""
    return pd.DataFrame if backend == "pandas" else pl.DataFrame


def as_polars(frame: Any) -> pl.DataFrame:
    """Any returned frame (pandas or Polars) as a Polars DataFrame, for assertions."""
    if isinstance(frame, pl.DataFrame):
        return frame
    if isinstance(frame, pd.DataFrame):
        return pl.from_pandas(frame)
    raise TypeError(f"not a frame: {type(frame).__name__}")


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
    """One local SparkSession for every Spark test (``local[2]``, 4 shuffle partitions, no UI).

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
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("tabdp-tests")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
