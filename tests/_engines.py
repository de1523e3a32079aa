"""The five engines (input forms) of the ``.dp`` accessor, for tests.

- ``"pandas"``: a ``pd.DataFrame``;
- ``"polars"``: a ``pl.DataFrame``;
- ``"lazy"``: a ``pl.LazyFrame`` from ``.lazy()`` (the plan holds the data in memory);
- ``"streaming"``: a ``pl.LazyFrame`` from ``pl.scan_parquet`` of a file written to the test's
  ``tmp_path``: an input the caller never materialises;
- ``"spark"``: a PySpark DataFrame on the tests' one ``local[2]`` session (marker ``spark``;
  skipped without PySpark or Java), made from the Polars frame through Arrow, so nulls and NaN
  stay distinct; categorical columns arrive as strings (Spark has no categorical type).

The fixtures (``engine``, ``to_engine``, ``make_frame``, ...) are in ``conftest.py``; test modules
import the helpers from here (``from _engines import as_engine, as_polars``).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl

ENGINES = ("pandas", "polars", "lazy", "streaming", "spark")
BACKENDS = ENGINES  # the older name
LAZY_ENGINES = ("lazy", "streaming")  # the forms that arrive as pl.LazyFrame
POLARS_ENGINES = ("polars", "lazy", "streaming")

# the tests' one SparkSession: local[2], few shuffle partitions, no UI (see ``spark_session``)
SPARK_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "1g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # the tests' inputs are tiny: compiling costs more than running. Without whole-stage code
    # generation no Java source is compiled per plan (measured on four privacy tests: 8% less
    # CPU; adaptive execution off and a C1-only JIT gave nothing measurable)
    "spark.sql.codegen.wholeStage": "false",
    # nor per expression: interpreted evaluation. Together with the JVM options below, measured on
    # 16 spark_full tests: JVM CPU 187 s -> 104 s, wall 239 s -> 145 s (machine shared, load 3-6)
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    # the JVM runs briefly on tiny data: the C1 compiler only (C2 spent most of the JIT time) and
    # the serial collector (2 cores shared with the Python workers). Applied at JVM launch, since
    # the builder starts the JVM
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xshare:auto",
    # PySpark 4 records the Python call site of every Column function for its error messages:
    # four JVM round trips per call. Off, a sum + count + report made 9,273 round trips instead
    # of 24,090 (tests only: a user's session keeps the setting it has)
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}


def spark_session() -> Any:
    """The tests' SparkSession (created on first use; the ``spark`` fixture stops it)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("tabdp-tests")
    extra = dict(kv.split("=", 1) for kv in os.environ.get("TABDP_TEST_SPARK_CONF", "").split(";")
                 if kv)  # measurement hook: "key=value;key=value" added to SPARK_CONF
    for k, v in {**SPARK_CONF, **extra}.items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def as_spark(df: pl.DataFrame) -> Any:
    """A Polars frame as a PySpark DataFrame (through Arrow; categoricals as strings)."""
    frame = df.with_columns(pl.col(c).cast(pl.String) for c, dt in df.schema.items()
                            if isinstance(dt, (pl.Categorical, pl.Enum)))
    return spark_session().createDataFrame(frame.to_arrow())

# Polars dtype overrides and their pandas equivalents (for ``make_frame(..., dtypes=...)``).
_PANDAS_DTYPES = {
    pl.Categorical: "category",
    pl.Int32: "int32",
    pl.Int64: "int64",
    pl.Float64: "float64",
    # pandas 3's default text dtype; pandas 2's astype("str") would turn None into "None"
    pl.String: "str" if int(pd.__version__.split(".")[0]) >= 3 else "string",
}


_FILES = itertools.count()


def as_engine(df: Any, engine: str, tmp_path: Path | str | None = None,
              row_group_size: int | None = None) -> Any:
    """``df`` (a pandas or Polars DataFrame) in the input form of ``engine``.

    ``"streaming"`` writes ``df`` to a fresh Parquet file under ``tmp_path`` (in row groups of
    ``row_group_size`` rows if given) and returns ``pl.scan_parquet`` of it (pandas frames go
    through ``pl.from_pandas`` first).
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; one of {ENGINES}")
    if isinstance(df, pl.LazyFrame):
        df = df.collect()
    if engine == "pandas":
        return df if isinstance(df, pd.DataFrame) else df.to_pandas()
    frame = pl.from_pandas(df) if isinstance(df, pd.DataFrame) else df
    if engine == "polars":
        return frame
    if engine == "lazy":
        return frame.lazy()
    if engine == "spark":
        return as_spark(frame)
    if tmp_path is None:
        raise ValueError("the streaming engine needs tmp_path (the Parquet file's folder)")
    path = Path(tmp_path) / f"engine-input-{next(_FILES)}.parquet"
    frame.write_parquet(path, row_group_size=row_group_size)
    return pl.scan_parquet(path)


def build_frame(backend: str, data: Mapping[str, Any],
                dtypes: Mapping[str, Any] | None = None,
                tmp_path: Path | str | None = None) -> Any:
    """A native frame of engine ``backend`` holding ``data`` (columns → lists)."""
    dtypes = dict(dtypes or {})
    if backend == "pandas":
        df = pd.DataFrame({k: list(v) for k, v in data.items()})
        if dtypes:
            df = df.astype({k: _PANDAS_DTYPES[v] for k, v in dtypes.items()})
        return df
    df = pl.DataFrame(dict(data), schema_overrides=dtypes, strict=False)
    return as_engine(df, backend, tmp_path)


def as_polars(frame: Any) -> pl.DataFrame:
    """Any returned frame (pandas, Polars or PySpark) as a Polars DataFrame, for assertions."""
    if isinstance(frame, pl.DataFrame):
        return frame
    if isinstance(frame, pd.DataFrame):
        return pl.from_pandas(frame)
    if type(frame).__module__.startswith("pyspark"):
        if hasattr(frame, "toArrow"):  # PySpark >= 4.0
            out = pl.from_arrow(frame.toArrow())
            assert isinstance(out, pl.DataFrame)
            return out
        return pl.from_pandas(frame.toPandas())
    raise TypeError(f"not a frame: {type(frame).__name__}")


to_polars = as_polars


def mixed_rows(n: int, seed: int = 0) -> pl.DataFrame:
    """Rows for engine-equality tests (streaming and Spark replay).

    Text and integer keys (some outside a 3 x 3 key set), a lognormal measure with 3% NaN, a
    signed integer and a positive float.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.lognormal(2.0, 2.0, n)
    x[rng.random(n) < 0.03] = np.nan
    return pl.DataFrame({
        "c": rng.choice(["a", "b", "c", "d"], n),
        "s": rng.integers(0, 4, n),
        "x": x,
        "y": rng.integers(-5, 200, n),
        "w": rng.lognormal(1.0, 1.0, n),
    })


def replay_batch_sizes(monkeypatch: Any) -> list[int]:
    """Record the rows of every batch a streaming session's replay function runs on.

    Wraps ``tabdp.frame._stream._replay_batch`` (the batch function of a streaming release);
    returns the list the sizes are appended to.
    """
    import tabdp.frame._stream as stream

    sizes: list[int] = []
    real = stream._replay_batch

    def spy(*args: Any, **kwargs: Any) -> Any:
        fn = real(*args, **kwargs)

        def run(s: pl.Series) -> pl.Series:
            sizes.append(len(s))
            return fn(s)

        return run

    monkeypatch.setattr(stream, "_replay_batch", spy)
    return sizes


def session_state(session: Any) -> tuple[int, object]:
    """What a refused release must leave unchanged: the records kept and the noise generator.

    A release refused before it ran records nothing and draws no noise, so comparing this before
    and after shows that nothing was charged and no randomness was spent.
    """
    import copy

    return len(session.records), copy.deepcopy(session.rng._gen.bit_generator.state)
