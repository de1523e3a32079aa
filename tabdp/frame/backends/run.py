"""The engine a whole release run (``tabdp run``) works in, behind one protocol (`RunEngine`).

`tabdp.frame.backends.run_engine` decides it from the user's ``--engine`` choice; the release
workflow (`tabdp.release.runner`, `tabdp.release._tables`) then makes the same calls whatever
the engine: check that the engine can read the spec's input (data-free), open the engine
(Spark: start it, its log in a private file, and check the catalog table), run the checks of
the input's schema that the engine makes before any data is read, silence the engine's own
warnings, read the input with the engine's steps (`RunEngine.read_input`: the release workflow
writes the steps of each engine, the engine picks its own), hand its session handle to the
releases, and close it (handing back the log to keep in the confidential folder). The released
tables and the per-record report are the frame's (`tabdp.frame.releases`).

* `PolarsRun`: one machine. The input's schema is read from the files' footers before any
  data (the spec's mapping collisions are refused then); catalog tables are refused.
* `SparkRun`: PySpark. A session is started on a master (or an existing one used); the schema
  is read by Spark with the data (its checks are the data phase's).

PySpark is imported only by `SparkRun.open`.

Example:
    >>> from tabdp.frame.backends import run_engine
    >>> eng = run_engine("polars")
    >>> eng.name, eng.handle
    ('polars', None)
    >>> eng.open(None); eng.close() is None
    True
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, TypeVar

from tabdp.exceptions import SpecError, UnsupportedBackendError

__all__ = ["RunEngine", "PolarsRun", "SparkRun", "InputSteps", "DEFAULT_MASTER", "start_spark",
           "check_table", "require_pyspark"]

#: Master of the local SparkSession ``tabdp run --engine spark`` starts without ``--spark-master``.
DEFAULT_MASTER = "local[2]"

_In = TypeVar("_In", covariant=True)
_T = TypeVar("_T")


class InputSteps(Protocol[_In]):
    """The release workflow's input steps, written once per engine; the engine picks its own.

    The steps (read the input, number the rows, the input rules, key casts, derived keys) follow
    the spec, so the release workflow writes them (`tabdp.release._tables`); which of them run
    is the engine's choice (`RunEngine.read_input`), never a test of the engine's name.

    Example:
        >>> import contextlib
        >>> class Steps:
        ...     def polars(self): return contextlib.nullcontext("polars steps")
        ...     def spark(self, spark): return contextlib.nullcontext("spark steps")
        >>> with PolarsRun().read_input(Steps()) as read:
        ...     read
        'polars steps'
    """

    def polars(self) -> AbstractContextManager[_In]:
        """The input read and prepared by Polars (lazily)."""
        ...  # pragma: no cover - protocol

    def spark(self, spark: Any) -> AbstractContextManager[_In]:
        """The input read and prepared by the SparkSession ``spark`` (released on exit)."""
        ...  # pragma: no cover - protocol


class RunEngine(Protocol):
    """The engine of a release run: the calls the runner makes the same way for every engine.

    Attributes:
        name: ``"polars"`` or ``"spark"`` (the ``--engine`` value).
        streams_rows: Row mode without per-row state runs in this process
            (``Session(streaming=True)``: the report recomputed from the input and written
            batch by batch); ``False``: the engine keeps its own ledger (Spark).

    Example:
        >>> eng: RunEngine = PolarsRun()
        >>> eng.check_source(None)
    """

    name: str
    streams_rows: bool

    @property
    def handle(self) -> Any:
        """The engine's session handle for the releases (a SparkSession; ``None`` for Polars)."""
        ...  # pragma: no cover - protocol

    def check_source(self, table: str | None) -> None:
        """Data-free, before anything else: refuse an input the engine cannot read."""
        ...  # pragma: no cover - protocol

    def open(self, table: str | None,
             table_check: Callable[[Any, str], None] | None = None) -> None:
        """Start the engine (before any data); check the catalog table ``table`` exists.

        ``table_check``: also called with the engine's session and ``table`` once it exists
        (the run's checks of the table from the catalog, before any data).
        """
        ...  # pragma: no cover - protocol

    def before_data(self, check: Callable[[], None]) -> None:
        """Run ``check`` (the input's schema checks) if the engine reads the schema first."""
        ...  # pragma: no cover - protocol

    def quiet_warnings(self) -> None:
        """Inside ``warnings.catch_warnings``: ignore the engine's own notices (no data)."""
        ...  # pragma: no cover - protocol

    def read_input(self, steps: InputSteps[_T]) -> AbstractContextManager[_T]:
        """The input, read and prepared by this engine's own steps (``steps.polars()`` etc.)."""
        ...  # pragma: no cover - protocol

    def close(self) -> Path | None:
        """Stop what `open` started; the engine's log file to keep (``None``: none)."""
        ...  # pragma: no cover - protocol


class PolarsRun:
    """A run on one machine with Polars: nothing to start; the schema is checked first.

    Example:
        >>> eng = PolarsRun()
        >>> checked = []
        >>> eng.before_data(lambda: checked.append(True)); checked
        [True]
    """

    name = "polars"
    streams_rows = True

    @property
    def handle(self) -> None:
        """No session handle: the releases run in this process."""
        return None

    def check_source(self, table: str | None) -> None:
        """Refuse a Spark catalog table (only the Spark engine reads one).

        Args:
            table: The spec's ``input.table`` (``None``: files).

        Raises:
            SpecError: ``table`` is given.

        Example:
            >>> PolarsRun().check_source("db.t")
            Traceback (most recent call last):
            ...
            tabdp.exceptions.SpecError: ...
        """
        if table is not None:
            raise SpecError(
                "input.table", f"the input is the Spark catalog table {table!r}, which "
                "only the Spark engine reads. Nothing was read or written.\nHint: run with "
                "--engine spark (run_release(..., engine='spark')), or set input.path to "
                "Parquet files.")

    def open(self, table: str | None,
             table_check: Callable[[Any, str], None] | None = None) -> None:
        """Nothing to start (a catalog table is refused by `check_source`)."""

    def before_data(self, check: Callable[[], None]) -> None:
        """Polars reads the input's schema from the files' footers: ``check`` runs now."""
        check()

    def quiet_warnings(self) -> None:
        """Polars adds no notices of its own."""

    def read_input(self, steps: InputSteps[_T]) -> AbstractContextManager[_T]:
        """The Polars steps (``steps.polars()``): a lazy scan of the input."""
        return steps.polars()

    def close(self) -> None:
        """Nothing to stop, no log."""
        return None


class SparkRun:
    """A run in Spark: a session started on ``master`` (or the given one), stopped at the end.

    Args:
        spark: An existing SparkSession (kept running), or ``None``.
        master: The master URL of the session to start (default `DEFAULT_MASTER`).

    Example:
        >>> eng = SparkRun(None, None)
        >>> eng.name, eng.handle
        ('spark', None)
    """

    name = "spark"
    streams_rows = False

    def __init__(self, spark: Any, master: str | None) -> None:
        """A Spark run, not started."""
        self._spark = spark
        self._master = master
        self._owned: Any = None
        self._log: Path | None = None

    @property
    def handle(self) -> Any:
        """The SparkSession the releases run in (``None`` until `open`, unless given)."""
        return self._spark

    def check_source(self, table: str | None) -> None:
        """Spark reads files and catalog tables (the table is checked by `open`)."""

    def open(self, table: str | None,
             table_check: Callable[[Any, str], None] | None = None) -> None:
        """Start Spark (unless a session was given) and check the catalog table exists.

        The JVM's start-up and log lines (times, host, IP) are the curator's: they go to a
        private log file (`close` hands it back; never the terminal).

        Args:
            table: The spec's ``input.table`` (``None``: files).
            table_check: Called with the session and ``table`` once the table is found
                (the run's checks from the catalog: curator mode's column names,
                `tabdp.release._spark_run.check_table_columns`).

        Raises:
            UnsupportedBackendError: Spark could not start.
            SpecError: The catalog has no table ``table`` (or ``table_check``'s).
        """
        if self._spark is None:
            fd, name = tempfile.mkstemp(prefix="tabdp-spark-", suffix=".log")
            os.close(fd)
            self._log = Path(name)
        try:
            if self._spark is None:
                self._spark, self._owned = start_spark(self._master, log=self._log)
            if table is not None:
                check_table(self._spark, table)
                if table_check is not None:
                    table_check(self._spark, table)
        except BaseException:
            if self._owned is not None:
                self._owned.stop()
                self._owned = None
            if self._log is not None:
                self._log.unlink(missing_ok=True)
                self._log = None
            raise

    def before_data(self, check: Callable[[], None]) -> None:
        """Spark reads the input's schema with the data: its checks are the data phase's."""

    def quiet_warnings(self) -> None:
        """PySpark's own notices: nothing about the data.

        Py4j sockets left to the garbage collector, the deprecated APIs of distutils and
        pandas 2 that PySpark calls.
        """
        warnings.filterwarnings("ignore", category=ResourceWarning)
        for text in ("distutils Version classes are deprecated",
                     "is_categorical_dtype is deprecated",
                     "The copy keyword is deprecated"):
            warnings.filterwarnings("ignore", message=text)

    def read_input(self, steps: InputSteps[_T]) -> AbstractContextManager[_T]:
        """The Spark steps (``steps.spark(session)``), in the session `open` started or got."""
        return steps.spark(self._spark)

    def close(self) -> Path | None:
        """Stop the session if `open` started it; the JVM's log file, if one was made."""
        if self._owned is not None:
            self._owned.stop()
            self._owned = None
        log, self._log = self._log, None
        return log


@contextlib.contextmanager
def _quiet_pyspark() -> Iterator[None]:
    """PySpark's notice about the pandas version (it quotes a path of the server) is not shown."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="PySpark does not yet fully support",
                                category=FutureWarning)
        yield


@contextlib.contextmanager
def _stderr_to(log: Path | None) -> Iterator[None]:
    """While the JVM starts: file descriptor 2 (inherited by the JVM for its life) is ``log``.

    The JVM's own start-up lines and log4j's console lines (times, host name, IP address)
    then go to the log, never to the terminal.
    """
    if log is None:
        yield
        return
    sys.stderr.flush()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    saved = os.dup(2)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def start_spark(master: str | None, log: Path | None = None) -> tuple[Any, Any]:
    """A SparkSession on ``master`` (default `DEFAULT_MASTER`), and whether to stop it.

    A SparkSession already active in this process is used as it is (its own master wins).
    The Python workers run this interpreter unless ``PYSPARK_PYTHON`` says otherwise. A
    session created here logs nothing (Spark's log lines could quote data values) and does not
    record Python call sites in its plans; a local master gets 8 shuffle partitions. Other
    settings come from Spark's own configuration (``spark-defaults.conf``, ``SPARK_CONF_DIR``).

    Args:
        master: A Spark master URL (``local[4]``, ``spark://host:7077``, ``yarn``...).
        log: A file for everything the JVM writes to its standard error (start-up lines,
            log4j's console output), created 0600; ``None``: the process's own stderr. It has
            an effect only when this call starts the JVM.

    Returns:
        The session, and the same session if this call created it (the caller stops it at the
        end), else ``None``.

    Raises:
        UnsupportedBackendError: Spark could not start (no Java runtime, a bad master URL).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with _quiet_pyspark():
        from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, None
    builder = SparkSession.builder.master(master or DEFAULT_MASTER).appName("tabdp-run") \
        .config("spark.ui.showConsoleProgress", "false") \
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
    # (PySpark's record of the Python call site of every Column function, for its error
    # messages: four JVM round trips per call, most of a release's round trips; a run's
    # failures are reported in failure.json without Spark's call sites)
    if (master or DEFAULT_MASTER).startswith("local"):
        # one machine: a few shuffle partitions (Spark's default of 200 is meant for clusters)
        builder = builder.config("spark.sql.shuffle.partitions", "8")
    try:
        with _stderr_to(log), _quiet_pyspark():
            spark = builder.getOrCreate()
    except Exception as err:  # noqa: BLE001 - the JVM's many ways of not starting
        raise UnsupportedBackendError(
            f"Spark could not start on master {master or DEFAULT_MASTER!r}: "
            f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
            ". Nothing was read or written.\nHint: check the master URL (--spark-master) and "
            "that a Java runtime is installed (java on PATH or JAVA_HOME).") from None
    # Spark's own log lines could quote values of the data (a failed task's traceback): the
    # terminal gets none; the details of a failure go to failure.json like every other one
    spark.sparkContext.setLogLevel("OFF")
    return spark, spark


def _table_exists(spark: Any, name: str) -> bool:
    try:
        return bool(spark.catalog.tableExists(name))
    except Exception:  # noqa: BLE001 - an unparsable name or an unreachable catalog
        return False


def check_table(spark: Any, name: str) -> None:
    """Check that the spec's ``input.table`` is a table of the session's catalog (no data read).

    Args:
        spark: The SparkSession.
        name: The table name (``db.name`` or ``catalog.db.name``).

    Raises:
        SpecError: The catalog has no such table.
    """
    if not _table_exists(spark, name):
        raise SpecError(
            "input.table", f"the Spark catalog has no table {name!r}. Nothing was read or "
            "written.\nHint: check the name (db.table or catalog.db.table) and the session's "
            "catalog configuration (--spark-master, or pass an existing session).")


def require_pyspark() -> None:
    """Check that PySpark imports (before a Spark run is planned; nothing started).

    Raises:
        UnsupportedBackendError: PySpark is not installed or does not import.

    Example:
        >>> require_pyspark.__name__  # raises without PySpark: see the engine's tests
        'require_pyspark'
    """
    try:
        with _quiet_pyspark():
            import pyspark.sql  # noqa: F401
    except ImportError:
        raise UnsupportedBackendError(
            "the Spark engine needs PySpark, which is not installed (or does not import). "
            "Nothing was read or written.\nHint: pip install 'tabdp[spark]' (PySpark 3.5 to "
            "4.x) and a Java runtime, or run with --engine polars.") from None
