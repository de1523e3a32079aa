"""The one place that decides which engine runs a release, from the frame's class alone.

Every module that needs to know which engine a frame belongs to asks here (the accessor, the
request checks, the session's binding of author-mode frames, the Spark engine's own guard): a
frame's class, never its data, decides. PySpark is never imported here (a Spark frame is
recognised by its class name), so the decision costs nothing when Spark is not installed.

Engines:

* ``"memory"``: Polars in memory (pandas and Polars DataFrames; a LazyFrame in a session that
  keeps per-row state), a snapshot of the input per release (`tabdp.frame._release`);
* ``"streaming"``: Polars streaming, a session without per-row state (row mode, a LazyFrame
  input or ``Session(streaming=True)``): each release one lazy plan (`tabdp.frame._stream`);
* ``"spark"``: PySpark DataFrames, released in Spark (`tabdp.frame._spark`).

A whole release run (``tabdp run --engine polars|spark``) gets its engine here too
(`run_engine`: a `tabdp.frame.backends.run.RunEngine` the release workflow calls the same way
for every engine).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Literal

import polars as pl

from tabdp.exceptions import InvalidParameterError
from tabdp.frame import binding
from tabdp.frame.backends.run import PolarsRun, RunEngine, SparkRun, require_pyspark

__all__ = ["Engine", "FrameKind", "ENGINES", "frame_kind", "is_frame", "is_spark_frame",
           "pandas_exact", "nan_is_missing",
           "is_lazy_frame", "is_pandas_frame", "ledger_engine", "output_library", "polars_engine",
           "release_engine", "pin_frame", "RUN_ENGINES", "RunEngine", "run_engine",
           "pinned_by_curator_only", "configured_master", "from_pandas"]

#: The engines a release runs on.
Engine = Literal["memory", "streaming", "spark"]
ENGINES: tuple[Engine, ...] = ("memory", "streaming", "spark")

#: The engines a whole release run (``tabdp run --engine``) works in.
RUN_ENGINES: tuple[str, ...] = ("polars", "spark")

#: The kinds of input frame: pandas, Polars eager, Polars lazy, PySpark.
FrameKind = Literal["pandas", "polars", "lazy", "spark"]


def is_spark_frame(native: Any) -> bool:
    """Whether ``native`` is a PySpark DataFrame (checked by class name: PySpark not imported).

    Args:
        native: Any object.

    Returns:
        True for a ``pyspark.sql`` DataFrame (classic or Spark Connect).

    Example:
        >>> is_spark_frame(pl.DataFrame())
        False
    """
    return any(c.__module__.startswith("pyspark.sql") and c.__name__ == "DataFrame"
               for c in type(native).__mro__)


def is_pandas_frame(native: Any) -> bool:
    """Whether ``native`` is a pandas DataFrame, without importing pandas.

    A pandas frame exists only once pandas is imported, so a process that never imports it
    (a ``tabdp run`` of a Parquet file, a Polars program) does not pay for its import.

    Args:
        native: Any object.

    Returns:
        ``True`` for a pandas DataFrame.

    Example:
        >>> import pandas as pd
        >>> is_pandas_frame(pd.DataFrame()), is_pandas_frame(pl.DataFrame())
        (True, False)
    """
    pd = sys.modules.get("pandas")
    frame = getattr(pd, "DataFrame", None)
    return frame is not None and isinstance(native, frame)


def pinned_by_curator_only(native: Any) -> bool:
    """Whether a frame may be pinned only in the curator's own call, never inside a release.

    A pandas frame (or a subclass): converting it can fail on one record's value (an object
    column holding text among numbers), so a bare author-mode session must not bind it inside
    an author's release (`tabdp.frame._author.bind_frame`). Decided by the type alone.

    Args:
        native: A frame.

    Returns:
        ``True`` for pandas frames.

    Example:
        >>> import pandas as pd
        >>> pinned_by_curator_only(pd.DataFrame()), pinned_by_curator_only(pl.DataFrame())
        (True, False)
    """
    return is_pandas_frame(native)


def frame_kind(native: Any) -> FrameKind | None:
    """The kind of frame ``native`` is, from its class alone (``None``: not a frame).

    Args:
        native: Any object.

    Returns:
        ``"pandas"``, ``"polars"`` (a DataFrame), ``"lazy"`` (a LazyFrame), ``"spark"`` or
        ``None``.

    Example:
        >>> import pandas as pd
        >>> frame_kind(pl.LazyFrame()), frame_kind(pd.DataFrame()), frame_kind({})
        ('lazy', 'pandas', None)
    """
    if isinstance(native, pl.LazyFrame):
        return "lazy"
    if isinstance(native, pl.DataFrame):
        return "polars"
    if is_pandas_frame(native):
        return "pandas"
    if is_spark_frame(native):
        return "spark"
    return None


def is_frame(native: Any) -> bool:
    """Whether ``native`` is a frame tabdp releases (pandas, Polars eager or lazy, PySpark).

    Args:
        native: Any object.

    Returns:
        True for a frame of a supported library.

    Example:
        >>> is_frame(pl.DataFrame()), is_frame([1])
        (True, False)
    """
    return frame_kind(native) is not None


def is_lazy_frame(native: Any) -> bool:
    """Whether ``native`` is a Polars LazyFrame (an input that may be larger than memory).

    Args:
        native: Any object.

    Returns:
        True for a ``polars.LazyFrame``.

    Example:
        >>> is_lazy_frame(pl.LazyFrame()), is_lazy_frame(pl.DataFrame())
        (True, False)
    """
    return isinstance(native, pl.LazyFrame)


def ledger_engine(native: Any) -> Literal["polars", "spark"]:
    """The engine a session's ledger lives in when it releases ``native``.

    A session keeps its ledger in one engine: Spark for PySpark frames, Polars for pandas and
    Polars frames.

    Args:
        native: The release's input frame.

    Returns:
        ``"spark"`` or ``"polars"``.

    Example:
        >>> import pandas as pd
        >>> ledger_engine(pd.DataFrame())
        'polars'
    """
    return "spark" if is_spark_frame(native) else "polars"


def output_library(native: Any) -> Literal["pandas", "polars", "spark"]:
    """The library a release's table is returned in (the input's own).

    Args:
        native: The release's input frame.

    Returns:
        ``"pandas"`` for pandas, ``"spark"`` for PySpark, ``"polars"`` otherwise (eager and
        lazy Polars input give a Polars DataFrame).

    Example:
        >>> import pandas as pd
        >>> output_library(pd.DataFrame()), output_library(pl.LazyFrame())
        ('pandas', 'polars')
    """
    kind = frame_kind(native)
    return "pandas" if kind == "pandas" else "spark" if kind == "spark" else "polars"


def polars_engine(session: Any) -> Literal["memory", "streaming"]:
    """The Polars engine of a session's releases: streaming without per-row state, else memory.

    Args:
        session: A [`Session`][tabdp.Session] whose ledger was chosen (its first release
            decides, `tabdp.frame.binding.choose_ledger`).

    Returns:
        ``"streaming"`` or ``"memory"``.

    Example:
        >>> import tabdp
        >>> polars_engine(tabdp.Session(streaming=True)), polars_engine(tabdp.Session())
        ('streaming', 'memory')
    """
    return "streaming" if session.streaming else "memory"


def release_engine(native: Any, session: Any) -> Engine:
    """The engine that runs a release of ``native`` in ``session`` (decided from classes only).

    A PySpark frame runs in Spark. A pandas or Polars frame runs in Polars: streaming when the
    session keeps no per-row state (a row-mode session whose first release was a LazyFrame, or
    ``Session(streaming=True)``), in memory otherwise. A session whose ledger is not yet chosen
    is decided by this input as its first release would (nothing is changed here).

    Args:
        native: The release's input frame.
        session: The release's [`Session`][tabdp.Session] (``None``: a fresh one-off session).

    Returns:
        ``"memory"``, ``"streaming"`` or ``"spark"``.

    Example:
        >>> import tabdp
        >>> release_engine(pl.LazyFrame(), tabdp.Session()), release_engine(pl.DataFrame(), None)
        ('streaming', 'memory')
    """
    if is_spark_frame(native):
        return "spark"
    # (a session= that is not a Session is refused later, with the release's argument checks)
    undecided = session is None or not hasattr(session, "records") or (
        binding.of(session).streaming_choice is None and not session.records)
    if undecided:
        return "streaming" if is_lazy_frame(native) else "memory"
    return polars_engine(session)


def pin_frame(native: Any, pin: Callable[[Any], Any] | None = None) -> Any:
    """Pin a frame's data now (author mode binds a session to the pinned data).

    A Polars LazyFrame is evaluated, a DataFrame cloned, a pandas frame converted (each as a
    LazyFrame over the pinned data); a Spark frame is checkpointed (``localCheckpoint``), or
    pinned by ``pin``.

    Args:
        native: The frame.
        pin: How to pin a frame of another engine.

    Returns:
        The pinned data (a Polars LazyFrame, or the engine's pinned frame).

    Example:
        >>> pin_frame(pl.DataFrame({"x": [1]})).collect().height
        1
    """
    if pin is None and is_spark_frame(native):
        return native.localCheckpoint(eager=True)
    if pin is not None:  # another engine pins its own frames
        return pin(native)
    if isinstance(native, pl.LazyFrame):
        return native.collect().lazy()
    if isinstance(native, pl.DataFrame):
        return native.clone().lazy()
    return from_pandas(native).lazy()


def from_pandas(native: Any) -> pl.DataFrame:
    """A pandas frame as Polars, an object column of missing values only as dtype Null.

    ``polars.from_pandas`` infers String for an object column holding only ``None`` (or
    NaN): a release then called a measure of no values a text column and refused an integer
    key set because the key column was "String in the data". Polars' own frame of only nulls
    has dtype Null, which a release reads as what it is: no value (a key column of nulls
    matches no key; a measure of nulls is refused as of dtype Null). Other columns are
    converted as ``polars.from_pandas`` converts them.

    Args:
        native: The pandas DataFrame.

    Returns:
        The Polars DataFrame.

    Example:
        >>> import pandas as pd
        >>> df = pd.DataFrame({"k": pd.Series([None, None], dtype=object), "s": ["a", None]})
        >>> from_pandas(df).schema
        Schema([('k', Null), ('s', String)])
    """
    import numpy as np

    out = pl.from_pandas(native)
    empty = [name for name, dtype in zip(out.columns, native.dtypes, strict=True)
             if dtype == np.dtype(object) and out.schema[name] == pl.String
             and out[name].null_count() == out.height]
    return out.with_columns(pl.col(c).cast(pl.Null) for c in empty) if empty else out


def configured_master(engine: str | None, master: str | None) -> str | None:
    """A configured Spark master (``[engine] spark_master``) for the run's engine, if it uses one.

    Args:
        engine: The run's engine as chosen (``None``: the default, Polars).
        master: The configured master, or ``None``.

    Returns:
        ``master`` for the Spark engine, else ``None`` (the Polars engine takes no master).

    Example:
        >>> configured_master("spark", "yarn"), configured_master(None, "yarn")
        ('yarn', None)
    """
    return master if engine == "spark" else None


def run_engine(engine: str, spark: Any = None, master: str | None = None) -> RunEngine:
    """The engine of a release run, from the user's choice (checked; nothing started, no data).

    Args:
        engine: ``"polars"`` or ``"spark"`` (`RUN_ENGINES`).
        spark: An existing SparkSession (Spark engine only).
        master: A Spark master URL (Spark engine only; not with ``spark``).

    Returns:
        The run's engine (`tabdp.frame.backends.run.PolarsRun` or ``SparkRun``), not started.

    Raises:
        InvalidParameterError: An unknown engine, Spark options with the Polars engine, or
            both an existing session and a master.
        UnsupportedBackendError: The Spark engine without PySpark installed.

    Example:
        >>> run_engine("polars").name
        'polars'
        >>> try:
        ...     run_engine("duckdb")
        ... except ValueError as err:
        ...     print(str(err).split(";")[0])
        unknown engine 'duckdb'
    """
    if engine not in RUN_ENGINES:
        raise InvalidParameterError(
            f"unknown engine {engine!r}; the engines are {', '.join(map(repr, RUN_ENGINES))}. "
            "Nothing was read or written.\nHint: --engine polars (the default, one machine) or "
            "--engine spark (pip install 'tabdp[spark]').")
    if engine == "polars":
        if spark is not None or master is not None:
            raise InvalidParameterError(
                "a Spark session or master was given, but the engine is 'polars'. Nothing was "
                "read or written.\nHint: add --engine spark (run_release(..., engine='spark')),"
                " or leave out the Spark options.")
        return PolarsRun()
    if spark is not None and master is not None:
        raise InvalidParameterError(
            "both an existing Spark session and a Spark master were given; a session already "
            "has its master. Nothing was read or written.\nHint: pass one of them.")
    if spark is None:
        require_pyspark()
    return SparkRun(spark, master)


#: pandas' nullable integer dtypes, named as Polars names its integer dtypes.
_PANDAS_NULLABLE_INTS = frozenset(f"{u}Int{b}" for u in ("", "U") for b in (8, 16, 32, 64))


def pandas_exact(out: pl.DataFrame) -> Any:
    """``out`` as a pandas DataFrame, integer columns holding a null as exact integers.

    pandas' default turns an integer column holding a null (a null key) into float64, which
    holds integers exactly only up to 2**53 (the key 2**53 + 1 became 2**53, review r77): such
    a column becomes a pandas nullable integer (``Int64``, ``UInt8``, ...; wider integers:
    Python ints).

    Args:
        out: A Polars frame (a released table).

    Returns:
        The pandas DataFrame.

    Example:
        >>> pandas_exact(pl.DataFrame({"k": [2**53 + 1, None]}))["k"].tolist()
        [9007199254740993, <NA>]
    """
    import pandas as pd  # a pandas output: pandas is imported already

    df = out.to_pandas()
    for c, dtype in out.schema.items():
        if dtype.is_integer() and out[c].null_count():
            name = str(dtype)
            exact: Any = name if name in _PANDAS_NULLABLE_INTS else "object"
            df[c] = pd.array(out[c].to_list(), dtype=exact)
    return df


def nan_is_missing(native: Any) -> frozenset[str]:
    """The columns of a pandas frame whose missing value is NaN (read as null by Polars).

    NumPy float and object columns: there NaN is pandas' one missing value, and the input
    reaches the engine with it as null. A nullable (``Float64``) or Arrow-backed float column
    keeps NaN apart from ``NA``, as Polars does (review r80). Public: the dtypes only.

    Example:
        >>> import pandas as pd
        >>> sorted(nan_is_missing(pd.DataFrame({"a": [1.0], "b": pd.array([1.0], "Float64")})))
        ['a']
    """
    import numpy as np

    return frozenset(str(c) for c, t in native.dtypes.items()
                     if isinstance(t, np.dtype) and t.kind in "fO")
