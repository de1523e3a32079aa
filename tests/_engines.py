"""The four engines (input forms) of the ``.dp`` accessor, for tests.

- ``"pandas"``: a ``pd.DataFrame``;
- ``"polars"``: a ``pl.DataFrame``;
- ``"lazy"``: a ``pl.LazyFrame`` from ``.lazy()`` (the plan holds the data in memory);
- ``"streaming"``: a ``pl.LazyFrame`` from ``pl.scan_parquet`` of a file written to the test's
  ``tmp_path``: an input the caller never materialises.

The fixtures (``engine``, ``to_engine``, ``make_frame``, ...) are in ``conftest.py``; test modules
import the helpers from here (``from _engines import as_engine, as_polars``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl

ENGINES = ("pandas", "polars", "lazy", "streaming")
BACKENDS = ENGINES  # the older name
LAZY_ENGINES = ("lazy", "streaming")  # the forms that arrive as pl.LazyFrame

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
    """Any returned frame (pandas or Polars) as a Polars DataFrame, for assertions."""
    if isinstance(frame, pl.DataFrame):
        return frame
    if isinstance(frame, pd.DataFrame):
        return pl.from_pandas(frame)
    raise TypeError(f"not a frame: {type(frame).__name__}")


to_polars = as_polars
