"""The curator's object: the datasets a query author may use, and the author's sessions.

Author mode in Python is driven through a `Curator`. The curator, who holds the data,
declares each dataset an author may use (a name bound to a frame or a Parquet path, with a
declared schema), and creates one `AuthorSession` per author. The author holds that object
only: it makes releases (sums, counts, medians, quantiles of the dataset) and gives the public
summary, and nothing else: no frame, no per-record losses, no confidential counts, no
`Session`. The curator keeps the sessions (`session()`,
`report()`).

What the curator fixes, so that nothing the author sees depends on one record except through
the noise (docs/privacy-semantics.md, "The Python boundary"):

* **pinning at creation**: the dataset is read (its declared columns only, converted to the
  declared dtypes) when `author_session()` creates the session, never inside an
  author's call. A value that does not convert, a file that does not parse, a pandas column of
  mixed types: the curator's own call raises, plainly (the cause chained);
* **dtypes from declarations, never from contents**: a pandas frame or a Parquet path needs a
  declared schema; a Polars or Spark frame may use its own (typed) schema instead. A sum returns
  integer estimates only for a column declared integer (Float64 otherwise). An Enum is pinned
  as Categorical: its categories (part of its dtype, which the author sees) may come from the
  data;
* inside an author's call, a key set read from the data is refused, and any failure after the
  data is read is the one `DataFailure` (``tabdp.frame._author``);
* **the privacy unit** (``add(unit=...)``): the author cannot choose it (a finer unit would
  charge a firm's rows separately);
* **a lifetime ledger** (``add(ledger=...)``): every author session on the dataset is charged to
  it, so repeated sessions cannot average the noise away (docs/privacy-semantics.md,
  "Lifetime budgets across author runs").

This is an interface boundary for a server that runs an author's release calls and returns
what they return; it is not a sandbox for an author's own Python code in the curator's process
(such code can reach any object there).
"""

from __future__ import annotations

import itertools
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl

from tabdp._defaults import NEGATIVES as DEFAULT_NEGATIVES
from tabdp._validation import check_real
from tabdp.exceptions import DataValidationError, InvalidParameterError, TabdpWarning
from tabdp.frame import binding
from tabdp.frame.backends import is_spark_frame, nan_is_missing, pandas_exact
from tabdp.frame.keys import KeySet, pandas_keys
from tabdp.mechanisms import DEFAULT_LEVEL, Mechanism
from tabdp.privacy.budget import Budget
from tabdp.privacy.session import Report, Session

__all__ = ["Curator", "AuthorSession", "parse_dtype"]

_ALIASES: dict[str, Any] = {
    "int": pl.Int64, "integer": pl.Int64, "int8": pl.Int8, "int16": pl.Int16,
    "int32": pl.Int32, "int64": pl.Int64, "uint8": pl.UInt8, "uint16": pl.UInt16,
    "uint32": pl.UInt32, "uint64": pl.UInt64, "float": pl.Float64, "double": pl.Float64,
    "float32": pl.Float32, "float64": pl.Float64, "str": pl.String, "string": pl.String,
    "utf8": pl.String, "text": pl.String, "bool": pl.Boolean, "boolean": pl.Boolean,
    "date": pl.Date, "datetime": pl.Datetime("us"), "categorical": pl.Categorical,
}


def parse_dtype(dtype: Any, where: str = "schema") -> pl.DataType:
    """A declared column type: a Polars dtype, or its name (case-insensitive, common aliases).

    Args:
        dtype: A Polars dtype (class or instance) or a name: ``"Int64"``, ``"int"``,
            ``"Float64"``, ``"double"``, ``"String"``, ``"str"``, ``"Boolean"``, ``"Date"``,
            ``"Datetime"``, ``"Categorical"``, ...
        where: Where it was declared (for the error message).

    Returns:
        The Polars dtype (an instance).

    Raises:
        InvalidParameterError: An unknown name.

    Example:
        >>> parse_dtype("int64"), parse_dtype("Float64"), parse_dtype(pl.String)
        (Int64, Float64, String)
    """
    if isinstance(dtype, pl.DataType):
        return dtype
    if isinstance(dtype, type) and issubclass(dtype, pl.DataType):
        return dtype()
    if isinstance(dtype, str) and dtype.strip().lower() in _ALIASES:
        found = _ALIASES[dtype.strip().lower()]
        return found if isinstance(found, pl.DataType) else found()
    raise InvalidParameterError(
        f"{where}: unknown column type {dtype!r}; allowed: a Polars dtype or one of "
        f"{sorted(_ALIASES)} (case-insensitive).\nHint: e.g. schema={{'county': 'String', "
        "'payroll': 'Float64', 'emp': 'Int64'}.")


_DEFAULT: Any = object()  # "the curator's default" (budget=None means: no budget)


class _Dataset:
    """A declared dataset: its source, declared schema (or None: the frame's own), unit, ledger."""

    def __init__(self, name: str, data: Any, schema: dict[str, pl.DataType] | None,
                 unit: str | None, hive_partitioning: bool | None,
                 ledger: Path | None = None) -> None:
        self.name, self.data, self.schema = name, data, schema
        self.unit, self.hive_partitioning = unit, hive_partitioning
        self.ledger = ledger

    @property
    def kind(self) -> str:
        if isinstance(self.data, (str, Path)):
            return "path"
        if is_spark_frame(self.data):
            return "spark"
        return "pandas" if isinstance(self.data, pd.DataFrame) else "polars"


class Curator:
    """The curator's object: declared datasets, author sessions created on them.

    Args:
        budget: Default public per-record budget of the author sessions (a number, a curve or a
            `Budget`; ``None``: none).
        seed: Default seed of the author sessions: **for tests only** (``None``: secure OS
            randomness).
        require_ledger: Refuse an author session on a dataset declared without a ``ledger``
            (recommended on a server: every author session is then charged across sessions).
        max_rho: The most per-record ρ one author session may spend (``None``: no cap beyond
            its budget). A session's budget must then be a constant at most ``max_rho``, or
            curves with ``total`` at most ``max_rho`` (``[policy] max_rho`` of a configuration
            file).

    Example:
        >>> import polars as pl, tabdp
        >>> df = pl.DataFrame({"county": ["a", "a", "b"], "payroll": [10.0, 20.0, 5.0],
        ...                    "notes": ["x", "y", "z"]})
        >>> curator = tabdp.Curator(budget=100.0, seed=1)
        >>> curator.add("cbp", df, schema={"county": "String", "payroll": "Float64"})
        >>> author = curator.author_session("cbp")      # the object the author holds
        >>> author.schema
        {'county': 'String', 'payroll': 'Float64'}
        >>> out = author.sum("payroll", by="county",
        ...                  keys=tabdp.KeySet.from_dict(county=["a", "b"]),
        ...                  mechanism=tabdp.mechanisms.Gaussian(1.0), nulls="zero",
        ...                  negatives="zero")                 # declared data rules
        >>> out.columns[:2], out["payroll"].dtype
        (['county', 'payroll'], Float64)
        >>> curator.report(author.name).per_record["rho"].to_list()   # curator only
        [50.0, 0.0, 12.5]
    """

    def __init__(self, *, budget: float | Mapping[Any, Any] | Budget | None = None,
                 seed: int | None = None, require_ledger: bool = False,
                 max_rho: float | None = None) -> None:
        """Keep the defaults (checked now, as a session would)."""
        if max_rho is not None:
            max_rho = check_real("max_rho", max_rho, owner="Curator", gt=0.0,
                                 hint="a per-record zCDP cap on one author session, e.g. 4.0")
        self.max_rho = max_rho
        coerced = Budget.coerce(budget)
        if coerced is not None:
            self._within_cap(coerced, "Curator")
        self.budget = budget
        self.seed = seed
        if not isinstance(require_ledger, bool):
            raise InvalidParameterError(
                f"Curator: require_ledger must be True or False; got {require_ledger!r}.")
        self.require_ledger = require_ledger
        self._datasets: dict[str, _Dataset] = {}
        self._sessions: dict[str, Session] = {}
        self._authors: dict[str, AuthorSession] = {}
        self._count = itertools.count(1)

    def _within_cap(self, budget: Budget | None, owner: str) -> None:
        """Refuse a budget that does not keep a session within ``max_rho`` (data-free)."""
        cap = self.max_rho
        if cap is None:
            return
        if budget is None:
            raise InvalidParameterError(
                f"{owner}: this curator caps an author session at a per-record rho of {cap:g} "
                "(max_rho), so the session needs a budget; got none.\nHint: pass "
                f"budget={cap:g} (or Curator(budget=...) as the default).")
        total = budget.constant if budget.constant is not None else budget.total
        if total is None or total > cap:
            got = ("curves without total= (a unit's total grows with the measures released)"
                   if total is None else f"a total of {total:g}")
            raise InvalidParameterError(
                f"{owner}: the budget must keep every unit within the curator's cap of {cap:g} "
                f"per session (max_rho); got {got}.\nHint: budget={cap:g}, or "
                f"tabdp.Budget(curve, total={cap:g}).")

    # -- declaring ----------------------------------------------------------------------------
    def add(self, name: str, data: Any, *, schema: Mapping[str, Any] | None = None,
            unit: str | None = None, hive_partitioning: bool | None = False,
            ledger: str | Path | None = None) -> None:
        """Declare a dataset an author may use (nothing is read now).

        Args:
            name: The dataset's name (what authors and sessions refer to).
            data: A pandas DataFrame, a Polars DataFrame or LazyFrame, a PySpark DataFrame, or
                the path of a Parquet file or folder (read whole).
            schema: Column -> dtype (`parse_dtype()`): the only columns an author can
                release, read in these dtypes. Required for pandas frames and paths, whose
                dtypes can follow their contents; optional for Polars and Spark frames, whose
                own schema is then the declaration (a ``scan_csv`` LazyFrame infers it from
                its first rows: declare it). Sums give integer estimates only for columns
                declared integer.
            unit: The privacy unit's column (``None``: each row is a unit); declare it in the
                schema too when a schema is given. The author cannot change it.
            hive_partitioning: Paths only: read ``key=value`` folders as columns (``None``:
                declared columns named by the folders, as ``tabdp run`` reads a dataset that
                leaves ``hive_partitioning`` out; what `from_config` passes then).
            ledger: The folder of a lifetime ledger (`tabdp.Ledger`, created by
                ``tabdp ledger init`` or ``Ledger.create``): every author session on the
                dataset is charged to it (needs ``unit``). Nothing is opened now.

        Raises:
            InvalidParameterError: A malformed name, a name already used, an unsupported
                ``data``, a missing schema, an unknown dtype, or a ledger without a unit or
                with a unit whose dtype it cannot key (integers fitting Int64, or text).

        Example:
            >>> c = Curator()
            >>> c.add("cbp", "cbp.parquet", schema={"county": "str", "payroll": "double"})
            >>> c.datasets
            ['cbp']
        """
        if not isinstance(name, str) or not name or name in self._datasets:
            raise InvalidParameterError(
                f"Curator.add: the dataset name must be a new non-empty string; got {name!r} "
                f"(declared: {sorted(self._datasets)}).\nHint: give each dataset its own name.")
        if not (isinstance(data, (str, Path, pd.DataFrame, pl.DataFrame, pl.LazyFrame))
                or is_spark_frame(data)):
            raise InvalidParameterError(
                f"Curator.add: dataset {name!r} must be a pandas, Polars or PySpark frame or a "
                f"Parquet path; got {type(data).__name__}.")
        declared = None
        if schema is not None:
            if not isinstance(schema, Mapping) or not schema:
                raise InvalidParameterError(
                    f"Curator.add: the schema of {name!r} must be a non-empty mapping column "
                    f"-> dtype; got {schema!r}.")
            declared = {str(c): parse_dtype(t, f"Curator.add({name!r}) schema[{c!r}]")
                        for c, t in schema.items()}
        if ledger is not None and not isinstance(ledger, (str, Path)):
            raise InvalidParameterError(
                f"Curator.add: the ledger of {name!r} must be the path of a ledger folder; got "
                f"{type(ledger).__name__}.\nHint: ledger='ledgers/cbp' (created by tabdp "
                "ledger init); each author session opens it.")
        if ledger is not None and unit is None:
            raise InvalidParameterError(
                f"Curator.add: dataset {name!r} has a lifetime ledger, which is kept per unit, "
                "but no unit.\nHint: add unit='<stable id column>' (e.g. 'estab_id').")
        ds = _Dataset(name, data, declared, unit,
                      None if hive_partitioning is None else bool(hive_partitioning),
                      None if ledger is None else Path(ledger).absolute())
        if declared is None and ds.kind in ("pandas", "path"):
            raise InvalidParameterError(
                f"Curator.add: dataset {name!r} is a {ds.kind} source, whose column types can "
                "follow its contents (pandas makes an integer column float when one value is "
                "missing, and a Parquet file written by pandas keeps it), so it needs a "
                "declared schema.\nHint: add(..., schema={'county': 'String', 'payroll': "
                "'Float64'}) naming the columns authors may use.")
        if unit is not None and declared is not None and unit not in declared:
            raise InvalidParameterError(
                f"Curator.add: the unit column {unit!r} of {name!r} is not in its declared "
                f"schema {sorted(declared)}.\nHint: declare it, e.g. schema={{{unit!r}: "
                "'Int64', ...}.")
        if ledger is not None:
            _check_ledger_unit(name, unit, declared, data, ds.kind)
        _check_same_data(ds, self._datasets)
        self._datasets[name] = ds

    @classmethod
    def from_config(cls, config: Any, *, spark: Any = None) -> Curator:
        """A curator from a curator configuration (its datasets and defaults).

        Args:
            config: An object with ``datasets`` (name -> an object with ``path``, ``table``,
                ``hive_partitioning`` and ``schema``, and optionally ``unit``) and
                ``defaults`` (a mapping or an object with optional ``budget`` and ``seed``).
            spark: The SparkSession that reads ``table`` datasets (default: the active one).

        Returns:
            The curator, its datasets declared (nothing read).

        Example:
            >>> from types import SimpleNamespace as NS
            >>> cfg = NS(datasets={"cbp": NS(path="cbp.parquet", table=None,
            ...                              hive_partitioning=False,
            ...                              schema={"county": "String"})},
            ...          defaults={"budget": 1.0})
            >>> c = Curator.from_config(cfg)
            >>> c.datasets, c.budget
            (['cbp'], 1.0)
        """
        defaults = getattr(config, "defaults", None) or {}

        def default(key: str) -> Any:
            if isinstance(defaults, Mapping):
                return defaults.get(key)
            return getattr(defaults, key, None)

        budget = default("budget")
        if isinstance(budget, Mapping) and set(budget) == {"rho"}:  # a spec's [budget] table
            rho = budget["rho"]
            budget = ({float(k): float(v) for k, v in rho.items()} if isinstance(rho, Mapping)
                      else rho)
        out = cls(budget=budget, seed=default("seed"),
                  require_ledger=bool(getattr(config, "require_ledger", False)),
                  max_rho=getattr(config, "max_rho", None))
        for name, decl in dict(config.datasets).items():
            path, table = getattr(decl, "path", None), getattr(decl, "table", None)
            if table is not None:
                if spark is None:
                    from pyspark.sql import SparkSession

                    spark = SparkSession.getActiveSession()
                if spark is None:
                    raise InvalidParameterError(
                        f"Curator.from_config: dataset {name!r} is the Spark table {table!r}, "
                        "and no SparkSession is active.\nHint: pass spark=SparkSession.")
                data: Any = spark.table(table)
            else:
                data = path
            schema = getattr(decl, "schema", None) or None
            out.add(str(name), data, schema=schema, unit=getattr(decl, "unit", None),
                    # left out of the file: detected, as tabdp run reads it (review rev64a:
                    # False here gave partition columns held by folder names only as nulls)
                    hive_partitioning=getattr(decl, "hive_partitioning", None),
                    ledger=getattr(decl, "ledger", None))
        return out

    @classmethod
    def from_file(cls, path: Any, *, spark: Any = None) -> Curator:
        r"""A curator from a curator configuration file (the one ``tabdp run --curator`` reads).

        The file's datasets (``[datasets.<name>]``: a path read whole or a Spark table, the
        declared schema) and its default budget (``[defaults] budget = { rho = ... }``) are
        declared; nothing is read until an author session is created. Public folders and the
        output root concern specs (``tabdp run``) and are not used here.

        Args:
            path: The TOML file (reference: docs/reference/curator.md).
            spark: The SparkSession that reads ``table`` datasets (default: the active one).

        Returns:
            The curator.

        Raises:
            SpecError: The file is not a valid curator configuration (the key path is named).

        Example:
            >>> import pathlib, tempfile
            >>> d = pathlib.Path(tempfile.mkdtemp())
            >>> _ = (d / "curator.toml").write_text(
            ...     '[datasets.cbp]\npath = "cbp.parquet"\nschema = { county = "String" }\n'
            ...     '[defaults]\nbudget = { rho = 2.0 }\n')
            >>> c = Curator.from_file(d / "curator.toml")
            >>> c.datasets, c.budget
            (['cbp'], 2.0)
        """
        from tabdp.release.curator_config import load_curator_config

        return cls.from_config(load_curator_config(path), spark=spark)

    @property
    def datasets(self) -> list[str]:
        """The declared datasets' names.

        Example:
            >>> Curator().datasets
            []
        """
        return list(self._datasets)

    # -- sessions -----------------------------------------------------------------------------
    def author_session(self, dataset: str, *, name: str | None = None,
                       budget: Any = _DEFAULT, seed: Any = _DEFAULT,
                       track_cells: bool = False) -> AuthorSession:
        """Pin ``dataset`` and create an author's session on it.

        The declared columns are read now, in their declared dtypes (a LazyFrame or a path is
        evaluated, a Spark frame checkpointed): every release of the session reads this data,
        and no release of the author pins or converts anything.

        On a dataset with a ``ledger``, the ledger is opened (locked and verified) first,
        before anything is read, and held until `close()`: each release leaves out
        the units whose lifetime loss would pass the series' lifetime budget and is committed
        to the ledger as soon as it is made (its table is then in the author's hands).

        Args:
            dataset: A declared dataset's name.
            name: The session's name (default ``<dataset>-<n>``).
            budget: The session's public per-record budget (default: the curator's).
            seed: The session's seed (default: the curator's); **tests only**.
            track_cells: Keep a confidential per-cell audit of each release.

        Returns:
            The `AuthorSession` to hand to the author.

        Raises:
            InvalidParameterError: An unknown dataset or a session name already used, or a
                dataset without a ledger while ``require_ledger`` is set.
            LedgerError: The dataset's ledger is in use by another session or run (``busy``),
                missing, or does not verify: refused before anything is read; the message
                names the dataset only (the ledger's own error is chained, for the curator).
            DataValidationError: The data could not be pinned (a value that does not convert
                to its declared dtype, a file that does not parse, a column of mixed types, a
                column without a usable dtype). The message names the dataset; the cause is
                chained (CONFIDENTIAL: it may quote the data; do not pass it on to authors).

        Example:
            >>> import pandas as pd, tabdp
            >>> pdf = pd.DataFrame({"c": ["a", "b"], "x": [1.0, 2.0],
            ...                     "junk": pd.Series(["abc", 7], dtype=object)})
            >>> cur = tabdp.Curator(seed=3)
            >>> cur.add("d", pdf, schema={"c": "String", "x": "Float64"})
            >>> author = cur.author_session("d", name="alice")
            >>> type(author.count(by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]))).__name__
            'DataFrame'
        """
        if dataset not in self._datasets:
            raise InvalidParameterError(
                f"Curator.author_session: unknown dataset {dataset!r}; declared: "
                f"{sorted(self._datasets)}.\nHint: declare it with Curator.add(...).")
        ds = self._datasets[dataset]
        if name is None:
            name = f"{dataset}-{next(self._count)}"
            while name in self._sessions:
                name = f"{dataset}-{next(self._count)}"
        if not isinstance(name, str) or not name or name in self._sessions:
            raise InvalidParameterError(
                f"Curator.author_session: the session name must be a new non-empty string; "
                f"got {name!r} (used: {sorted(self._sessions)}).")
        if ds.ledger is None and self.require_ledger:
            raise InvalidParameterError(
                f"Curator.author_session: dataset {dataset!r} has no lifetime ledger, and this "
                "curator charges every author session to one (require_ledger=True). Nothing "
                "was read.\nHint: declare it with Curator.add(..., unit=..., ledger=...).")
        chosen = self.budget if budget is _DEFAULT else budget
        self._within_cap(Budget.coerce(chosen), "Curator.author_session")
        led = _open_ledger(ds)  # before anything is read
        try:
            native, pinned, declared = _pin(ds)
            session = Session(unit=ds.unit, seed=self.seed if seed is _DEFAULT else seed,
                              budget=chosen,
                              mode="author", track_cells=track_cells, ledger=led)
            binding.bind_pinned(session, native, pinned, declared)
        except BaseException:
            if led is not None:
                led.close()
            raise
        self._sessions[name] = session
        author = AuthorSession(_token=_TOKEN, session=session, frame=native, name=name,
                               dataset=dataset, schema=declared, pandas=ds.kind == "pandas",
                               nan_missing=nan_is_missing(ds.data) if ds.kind == "pandas"
                               else frozenset())
        self._authors[name] = author
        return author

    def close(self, name: str) -> None:
        """End an author session: its releases stop, its lifetime ledger is released.

        Every release of a session with a ledger is already committed; closing releases the
        ledger's lock, so that another session (or ``tabdp run``) on the dataset may open it.
        The session's report stays available to the curator. Closing twice does nothing.

        Args:
            name: The author session's name.

        Raises:
            InvalidParameterError: An unknown session.

        Example:
            >>> import polars as pl
            >>> c = Curator()
            >>> c.add("d", pl.DataFrame({"x": [1.0]}))
            >>> a = c.author_session("d", name="s")
            >>> c.close("s")
            >>> try:
            ...     a.count(by="x", keys=None)
            ... except ValueError as err:
            ...     print(str(err).splitlines()[0])
            this author session was closed by the curator.
        """
        session = self.session(name)
        author = self._authors.get(name)
        if author is None:
            if session.lifetime is not None:
                session.lifetime.close()
            return
        with author._lock:  # after a release under way (its commit included)
            author._closed = True
            if session.lifetime is not None:
                session.lifetime.close()

    def session(self, name: str) -> Session:
        """The full `Session` behind an author session (curator only).

        Args:
            name: The author session's name (`name`).

        Returns:
            The session: its report holds CONFIDENTIAL per-record losses.

        Example:
            >>> import polars as pl
            >>> c = Curator()
            >>> c.add("d", pl.DataFrame({"x": [1.0]}))
            >>> c.session(c.author_session("d", name="s").name).mode
            'author'
        """
        if name not in self._sessions:
            raise InvalidParameterError(
                f"Curator.session: unknown session {name!r}; sessions: "
                f"{sorted(self._sessions)}.")
        return self._sessions[name]

    def report(self, name: str, delta: float | None = None) -> Report:
        """The report of an author session: public summary and CONFIDENTIAL per-record table.

        Args:
            name: The author session's name.
            delta: Optional δ (see `report()`).

        Returns:
            The `Report` (``per_record`` and ``confidential_summary()`` are for
            the curator only).

        Example:
            >>> import polars as pl
            >>> c = Curator()
            >>> c.add("d", pl.DataFrame({"x": [1.0]}))
            >>> c.report(c.author_session("d").name).confidential_summary()["queries"]
            []
        """
        return self.session(name).report(delta)

    @property
    def sessions(self) -> list[str]:
        """The names of the author sessions created so far.

        Example:
            >>> Curator().sessions
            []
        """
        return list(self._sessions)

    def __repr__(self) -> str:
        """Datasets and sessions (names only)."""
        return f"Curator(datasets={self.datasets}, sessions={self.sessions})"


def _check_ledger_unit(name: str, unit: Any, declared: Mapping[str, Any] | None, data: Any,
                       kind: str) -> None:
    """A ledger's unit column must have ids it can key (integers fitting Int64, or text).

    Decided from the declared schema (or a Polars frame's own): else every release of every
    author session failed after reading the data (review R15).
    """
    if declared is not None:
        dtype = declared.get(unit)
    elif kind == "polars":
        schema = data.collect_schema() if isinstance(data, pl.LazyFrame) else data.schema
        dtype = schema.get(unit)
    else:
        return  # a Spark frame without a declared schema: refused at its first release
    if dtype is None:
        return  # a missing unit column is refused elsewhere
    text = dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum)
    if not text and (not dtype.is_integer() or dtype == pl.UInt64):
        raise InvalidParameterError(
            f"Curator.add: the unit column {unit!r} of {name!r} has dtype {dtype}, but a "
            "lifetime ledger keys units by an integer id that fits Int64, or by text.\nHint: "
            "declare it as 'Int64' or 'String' (the same type in every session of the series).")


def _unit_dtype(ds: _Dataset) -> Any:
    """A dataset's unit dtype: declared, else a Polars frame's own (``None``: not known).

    Review R16: without a declared schema, two Polars frames sharing a ledger were compared
    as ``None`` and ``None``, so an Int64 and a String unit were accepted.
    """
    if ds.unit is None:
        return None
    if ds.schema is not None:
        return ds.schema.get(ds.unit)
    if ds.kind == "polars":
        data = ds.data
        schema = data.collect_schema() if isinstance(data, pl.LazyFrame) else data.schema
        return schema.get(ds.unit)
    return None


def _check_same_data(ds: _Dataset, declared: Mapping[str, _Dataset]) -> None:
    """A new dataset against the declared ones (the configuration file's rules, in Python).

    Datasets over the same data (the same frame, the same or nested paths, links resolved)
    must have the same unit and ledger: otherwise the author would be handed the name with the
    weaker accounting. Datasets sharing one ledger must declare the same unit column with the
    same declared type. A ledger may not overlap a dataset's path (a folder is read whole).
    """
    def where(x: _Dataset) -> list[Path] | None:
        from tabdp.release.curator_config import data_locations

        return data_locations(x.data) if x.kind == "path" else None

    def led(x: _Dataset) -> Path | None:
        return None if x.ledger is None else Path(os.path.realpath(x.ledger))

    def overlap(a: Path, b: Path) -> bool:
        return a == b or a in b.parents or b in a.parents

    here = where(ds)
    for other in declared.values():
        there = where(other)
        same = (other.data is ds.data if here is None or there is None
                else any(overlap(a, b) for a in here for b in there))
        if same and (other.unit != ds.unit or led(other) != led(ds)):
            raise InvalidParameterError(
                f"Curator.add: dataset {ds.name!r} reads the same data as dataset "
                f"{other.name!r} (the same frame, or the same or nested path) with another "
                f"unit or ledger (unit {ds.unit!r} vs {other.unit!r}).\nHint: give both the "
                "same unit and ledger (an author would be handed the one with the weaker "
                "accounting), or declare the data once.")
        # one ledger keeps one account per unit value: datasets charging it must agree on
        # the unit's column and declared type (the text "7" and the integer 7 would be two
        # accounts, each with the whole lifetime budget)
        if led(ds) is not None and led(other) == led(ds):
            t_new, t_old = _unit_dtype(ds), _unit_dtype(other)
            if other.unit != ds.unit or t_new != t_old:
                raise InvalidParameterError(
                    f"Curator.add: datasets {other.name!r} and {ds.name!r} share one lifetime "
                    f"ledger but declare different units (dataset {other.name!r}: unit "
                    f"{other.unit!r} of type {t_old}; dataset {ds.name!r}: unit {ds.unit!r} "
                    f"of type {t_new}); a ledger keeps one account per unit, so a unit would "
                    "be charged separately through each dataset.\nHint: declare the same "
                    "unit column with the same type in both schemas, or give each dataset a "
                    "ledger of its own.")
    # the new dataset's ledger against every path, every declared ledger against its path
    pairs = [(ds, y) for y in [*declared.values(), ds]] + [(x, ds) for x in declared.values()]
    for x, y in pairs:
        lx, py = led(x), where(y)
        if lx is not None and py is not None and any(overlap(lx, q) for q in py):
            raise InvalidParameterError(
                f"Curator.add: the ledger of dataset {x.name!r} overlaps dataset {y.name!r} "
                "(a ledger holds per-unit losses; a dataset folder is read whole).\nHint: keep "
                "each ledger in a confidential folder of its own.")


def _open_ledger(ds: _Dataset) -> Any:
    """The dataset's lifetime ledger, locked and verified (``None`` without one).

    Its refusal names the dataset only (the message may reach an author); the ledger's own
    error, with its path, is chained for the curator.
    """
    if ds.ledger is None:
        return None
    from tabdp.exceptions import LedgerError
    from tabdp.privacy.lifetime import Ledger
    from tabdp.release.curator_config import dataset_ledger_error, dataset_ledger_warnings

    notes: list[str] = []
    try:
        # its own anchor notices, passed on naming the dataset (never the ledger's path),
        # also those of an open that fails after writing the anchor (``_notes``)
        led = Ledger.open(ds.ledger, autocommit=True, _quiet=True, _notes=notes)
    except (LedgerError, InvalidParameterError) as err:
        refusal = dataset_ledger_error(ds.name, err)
        dataset_ledger_warnings(ds.name, notes)
        for note in notes:  # the curator's, with the ledger's path: on the chained cause
            err.add_note(f"(the ledger's anchor notice at this open) {note}")
        raise refusal from err
    dataset_ledger_warnings(ds.name, notes)
    return led


def _pin(ds: _Dataset) -> tuple[Any, Any, dict[str, pl.DataType]]:
    """The bound frame, its pinned data and the declared schema (raised plainly on failure)."""
    try:
        if ds.kind == "spark":
            return _pin_spark(ds)
        frame, nulled, absent = _pin_polars(ds)
    except (KeyboardInterrupt, SystemExit):
        raise
    except InvalidParameterError:
        raise
    except BaseException as err:  # noqa: BLE001 - Rust panics are BaseExceptions
        raise DataValidationError(
            f"Curator: dataset {ds.name!r} could not be pinned to its declared schema "
            f"({type(err).__name__}); no session was created. The cause is chained below "
            "(CONFIDENTIAL: it may quote the data; never pass it on to an author).\nHint: fix "
            "the data or the declared schema (Curator.add(..., schema=...)).",
            confidential={"error": f"{type(err).__name__}: {err}"}) from err
    if absent:  # the curator's own call: which columns the files hold is CONFIDENTIAL
        warnings.warn(
            f"Curator: dataset {ds.name!r}: the declared column(s) {absent} are in none of its "
            "files, so every value there is null, as tabdp run reads them (CONFIDENTIAL: "
            "which columns the files hold can depend on single records; never pass this "
            "warning on to an author).\nHint: check the declared names (Curator.add(..., "
            "schema=...)).", TabdpWarning, stacklevel=3)
    if nulled:  # the curator's own call: CONFIDENTIAL counts
        warnings.warn(
            f"Curator: dataset {ds.name!r}: values its declared dtypes cannot represent are "
            f"null (the author's null rules apply to them); count by column: {nulled} "
            "(CONFIDENTIAL: never pass this warning on to an author).\nHint: fix the data or "
            "the declared schema (e.g. Float64 for a column with fractions).", TabdpWarning,
            stacklevel=3)
    # an Enum's categories are part of its dtype, which the author sees (`AuthorSession.schema`,
    # a data-free refusal's message) and may come from the data (``pl.Enum(df["c"].unique())``,
    # declared or the frame's own: one record adds a category): pinned as Categorical, whose
    # dtype names no value (review rev65x). A release's key column is an Enum of the key set's
    # values either way (`tabdp.frame._output._key_cast`)
    uncat = {c: _no_categories(t) for c, t in frame.schema.items()}
    changed = [c for c, t in uncat.items() if t != frame.schema[c]]
    if changed:
        frame = frame.with_columns(pl.col(c).cast(uncat[c]) for c in changed)
    return frame, frame.lazy(), dict(frame.schema)


def _pin_polars(ds: _Dataset) -> tuple[pl.DataFrame, dict[str, int], list[str]]:
    """Read and convert a pandas / Polars / path dataset now (declared columns only).

    Declared columns are converted leniently (`convert_leniently`): a value its declared
    dtype cannot represent (a fraction in an integer column, text that does not parse) is
    null, as in ``tabdp run``, and the curator is warned with the counts. A path is read file
    by file against the declared schema (`scan_declared`), as ``tabdp run`` reads an
    author-mode dataset, so files whose dtypes follow their contents (pandas' float64 for an
    integer column with one missing value) read as the declared dtypes.

    A declared column in none of a path's files reads as nulls, as ``tabdp run`` reads it
    (review R15: refusing it made the curator's call fail on a dataset and succeed on its
    neighbour whose one more file, holding one record, has the column).

    Returns:
        The frame, the count of values made null by the conversion, by column, and the
        declared columns in none of a path's files.
    """
    from tabdp.release.declared import (
        LOST,
        convert_leniently,
        dataset_files,
        file_columns,
        scan_declared,
    )

    data = ds.data
    absent: list[str] = []
    if ds.kind == "path":
        assert ds.schema is not None
        files = dataset_files(Path(data))
        # a name a file holds twice is in it, null there (`file_columns`; review rev65x: such
        # a column was said to be "in none of its files")
        present = {c for f in files for part in file_columns(f) for c in part}
        lf = scan_declared(Path(data), ds.schema, hive=ds.hive_partitioning, flag_lost=True)
        parts = ({p.split("=", 1)[0] for f in files for p in f.relative_to(data).parts[:-1]
                  if "=" in p} if Path(data).is_dir() and ds.hive_partitioning is not False
                 else set())
        absent = [c for c in ds.schema if c not in present and c not in parts]
        lf = lf.select(*ds.schema, *(LOST + c for c in ds.schema))
    else:
        if ds.kind == "pandas":
            assert ds.schema is not None
            missing = [c for c in ds.schema if c not in data.columns]
            if missing:
                raise InvalidParameterError(
                    f"Curator: the declared column(s) {missing} of {ds.name!r} are not in the "
                    f"frame; it has {list(map(str, data.columns))}.")
            data = pl.from_pandas(data[list(ds.schema)])  # only the declared columns
        if ds.schema is None:
            frame = data.collect() if isinstance(data, pl.LazyFrame) else data.clone()
            _check_usable(ds.name, dict(frame.schema))
            return frame, {}, []
        lf = data.lazy()
        have = lf.collect_schema()
        missing = [c for c in ds.schema if c not in have.names()]
        if missing:
            raise InvalidParameterError(
                f"Curator: the declared column(s) {missing} of {ds.name!r} are not in its "
                f"schema {have.names()}.")
        conv = {c: convert_leniently(pl.col(c), have[c], t) for c, t in ds.schema.items()}
        lf = lf.select(*(e.alias(c) for c, e in conv.items()),
                       *((pl.col(c).is_not_null() & e.is_null()).alias(LOST + c)
                         for c, e in conv.items()))
    frame = lf.collect()
    lost = frame.select(pl.col(LOST + c).sum().alias(c) for c in ds.schema).row(0, named=True)
    frame = frame.select(list(ds.schema))
    nulled = {c: n for c, n in lost.items() if n}
    _check_usable(ds.name, dict(frame.schema))
    return frame, nulled, absent


def _no_categories(dtype: Any) -> Any:
    """``dtype`` with every Enum in it (also inside lists, arrays, structs) as Categorical.

    Example:
        >>> _no_categories(pl.List(pl.Enum(["a", "b"]))), _no_categories(pl.Int64)
        (List(Categorical), Int64)
    """
    if isinstance(dtype, pl.Enum):
        return pl.Categorical()
    if isinstance(dtype, pl.List):
        return pl.List(_no_categories(dtype.inner))
    if isinstance(dtype, pl.Array):
        return pl.Array(_no_categories(dtype.inner), dtype.shape)
    if isinstance(dtype, pl.Struct):
        return pl.Struct({f.name: _no_categories(f.dtype) for f in dtype.fields})
    return dtype


def _check_usable(name: str, schema: Mapping[str, Any]) -> None:
    """Refuse columns without a usable dtype (an untyped empty column, Python objects)."""
    bad = sorted(c for c, t in schema.items() if t == pl.Null or t == pl.Object)
    if bad:
        raise InvalidParameterError(
            f"Curator: column(s) {bad} of dataset {name!r} have no usable dtype (Null or "
            "Object: an untyped or empty column); their dtype would follow the data.\nHint: "
            "declare the schema, Curator.add(..., schema={column: dtype}).")


def _pin_spark(ds: _Dataset) -> tuple[Any, Any, dict[str, pl.DataType]]:
    """Select and cast the declared columns of a Spark frame, then checkpoint it now."""
    from pyspark.sql import functions as F

    from tabdp.frame.backends.spark import polars_schema

    sdf = ds.data
    if ds.schema is not None:
        missing = [c for c in ds.schema if c not in sdf.columns]
        if missing:
            raise InvalidParameterError(
                f"Curator: the declared column(s) {missing} of {ds.name!r} are not in the "
                f"frame; it has {sdf.columns}.")
        from tabdp.release.declared import convert_leniently_spark as lenient_cast

        have = {f.name: f.dataType for f in sdf.schema.fields}
        # as tabdp run converts: a value the declared dtype cannot represent is null (2.5 in
        # an integer column too, which Spark's cast would truncate to 2)
        sdf = sdf.select(*[lenient_cast(F.col(c), have[c], t).alias(c)
                           for c, t in ds.schema.items()])
    declared = polars_schema(sdf)
    _check_usable(ds.name, declared)
    pinned = sdf.localCheckpoint(eager=True)
    return pinned, pinned, declared


_TOKEN = object()  # only the curator creates author sessions


class AuthorSession:
    """What a query author holds: releases of one dataset and the public summary.

    Created by `author_session()`. The releases are those of the ``.dp`` accessor
    (same arguments, without ``session=``) on the curator's pinned dataset, in author mode:
    every data rule is declared (``nulls="zero"`` or ``"drop"``; a sum's ``negatives=``:
    ``"allow"``, ``"zero"`` or ``"drop"``, since the default ``"error"`` is refused from the
    arguments, before anything is read), a key set read from the data is refused, and a
    failure after the data is read is `DataFailure`. Tables come back in the dataset's library
    (pandas for a pandas dataset, Spark for a Spark one, Polars otherwise). Per-record losses,
    confidential counts, the data and the session stay with the curator.

    Example:
        >>> import polars as pl, tabdp
        >>> cur = tabdp.Curator(seed=1)
        >>> cur.add("d", pl.DataFrame({"c": ["a", "b", "b"], "pay": [1.0, 2.0, 3.0]}))
        >>> author = cur.author_session("d")
        >>> out = author.median("pay", by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
        ...                     bounds=(0.0, 10.0), epsilon=1.0, nulls="drop")
        >>> [q["kind"] for q in author.summary()["queries"]]
        ['median']
    """

    __slots__ = ("_session", "_frame", "_pandas", "_nan_missing", "_schema", "_closed", "_lock",
                 "name", "dataset")

    def __init__(self, *, _token: object, session: Session, frame: Any, name: str,
                 dataset: str, schema: Mapping[str, pl.DataType], pandas: bool,
                 nan_missing: frozenset[str] = frozenset()) -> None:
        """Created by `author_session()` only."""
        if _token is not _TOKEN:
            raise InvalidParameterError(
                "AuthorSession objects are created by the curator: "
                "Curator.author_session(dataset).\nHint: ask the curator for a session.")
        self._session = session
        self._frame = frame
        self._pandas = pandas
        #: the pandas dataset's columns whose NaN is its missing value (`nan_is_missing`)
        self._nan_missing = nan_missing
        self._schema = {c: str(t) for c, t in schema.items()}
        self._closed = False
        # one release at a time: the filter reads the units' losses so far and the release
        # then charges them (and commits the lifetime ledger); two releases at once from two
        # threads would both pass the filter on the same losses, and commit over each other
        self._lock = threading.Lock()
        #: The session's name (the curator finds the session by it).
        self.name = name
        #: The dataset's name.
        self.dataset = dataset

    @property
    def schema(self) -> dict[str, str]:
        """The dataset's declared columns and dtypes (public).

        Example:
            >>> import polars as pl
            >>> c = Curator()
            >>> c.add("d", pl.DataFrame({"x": [1]}), schema={"x": "Int32"})
            >>> c.author_session("d").schema
            {'x': 'Int32'}
        """
        return dict(self._schema)

    def _live(self) -> Any:
        """The pinned frame, unless the curator closed the session (checked before anything)."""
        if self._closed:
            raise InvalidParameterError(
                "this author session was closed by the curator.\nHint: ask the curator for a "
                "new session.")
        return self._frame

    def _out(self, table: Any) -> Any:
        # (integer columns holding a null, a null key, stay exact: `pandas_exact`)
        return pandas_exact(table) if self._pandas and isinstance(table, pl.DataFrame) else table

    def _keys(self, keys: Any) -> Any:
        # a pandas dataset: a NaN key is pandas' missing value, read as null (`pandas_keys`)
        return (pandas_keys(keys, self._nan_missing) if self._pandas and isinstance(keys, KeySet)
                else keys)

    def sum(self, columns: str | Sequence[str], *, by: str | Sequence[str], keys: KeySet,
            mechanism: Mechanism, level: float = DEFAULT_LEVEL, nulls: str = "error",
            name: str | None = None, grid: Any = None, negatives: str = DEFAULT_NEGATIVES,
            max_cells: int | None = None, form: str = "wide", cv: bool = False) -> Any:
        """Noisy sums per cell (see `sum()`).

        Estimates are Float64 unless the curator declared the column integer (then Int64,
        whatever the values: a noisy estimate outside the Int64 range is clamped to it, flag
        ``L``).

        Args:
            columns: Measure column(s).
            by: Group-by column(s): the key set's columns.
            keys: Public key set (never one read from the data).
            mechanism: The mechanism.
            level: Confidence level of the margins of error.
            nulls: ``"zero"`` or ``"drop"`` (author mode: declared).
            name: Label of the release.
            grid: Public rounding grid.
            negatives: Rule for negative values, to be declared: ``"allow"`` (a signed
                measure, additive mechanisms), ``"zero"`` or ``"drop"``. The default
                ``"error"`` is refused from the arguments (it would fail on the data).
            max_cells: Public bound on the cells one unit contributes to.
            form: ``"wide"`` or ``"long"``.
            cv: Wide form: add ``_cv`` and ``_flag``.

        Returns:
            The table (keys, estimate, ``_sd``, ``_moe``, ``_lower``, ``_upper``).

        Example:
            >>> import polars as pl, tabdp
            >>> c = tabdp.Curator(seed=1)
            >>> c.add("d", pl.DataFrame({"c": ["a"], "n": [3]}), schema={"c": "str", "n": "int"})
            >>> c.author_session("d").sum("n", by="c", keys=tabdp.KeySet.from_dict(c=["a"]),
            ...                           mechanism=tabdp.mechanisms.Gaussian(1.0),
            ...                           nulls="zero", negatives="allow")["n"].dtype
            Int64
        """
        keys = self._keys(keys)
        with self._lock:
            return self._out(self._live().dp.sum(
                columns, by=by, keys=keys, mechanism=mechanism, session=self._session, level=level,
                nulls=nulls, name=name, grid=grid, negatives=negatives, max_cells=max_cells,
                form=form, cv=cv))

    def count(self, *, by: str | Sequence[str], keys: KeySet, mechanism: Mechanism | None = None,
              level: float = DEFAULT_LEVEL, name: str | None = None, grid: Any = None,
              max_cells: int | None = None, max_rows: int | None = None, form: str = "wide",
              cv: bool = False) -> Any:
        """Noisy row counts per cell (see `count()`).

        Args:
            by: Group-by column(s).
            keys: Public key set.
            mechanism: The mechanism (default: exact discrete Gaussian noise).
            level: Confidence level.
            name: Label of the release.
            grid: Public rounding grid.
            max_cells: Public bound on the cells one unit contributes to.
            max_rows: Public bound on the rows one unit counts in one cell.
            form: ``"wide"`` or ``"long"``.
            cv: Wide form: add ``count_cv`` and ``count_flag``.

        Returns:
            The table (keys, ``count``, ``count_sd``, ...).

        Example:
            >>> import polars as pl, tabdp
            >>> c = tabdp.Curator(seed=1)
            >>> c.add("d", pl.DataFrame({"c": ["a", "a"]}))
            >>> c.author_session("d").count(by="c",
            ...                             keys=tabdp.KeySet.from_dict(c=["a"]))["count"].dtype
            Int64
        """
        keys = self._keys(keys)
        with self._lock:
            return self._out(self._live().dp.count(
                by=by, keys=keys, mechanism=mechanism, session=self._session, level=level,
                name=name, grid=grid, max_cells=max_cells, max_rows=max_rows, form=form, cv=cv))

    def median(self, column: str, *, by: str | Sequence[str], keys: KeySet,
               bounds: tuple[float, float], epsilon: float, noise: str = "polyplace",
               level: float = DEFAULT_LEVEL, gamma: float | None = None,
               delta: float | None = None, nulls: str = "error", name: str | None = None,
               grid: Any = None, uncertainty_share: float | None = None, form: str = "wide",
               cv: bool = False) -> Any:
        """Private medians per cell (see `median()`).

        Args:
            column: Measure column.
            by: Group-by column(s).
            keys: Public key set.
            bounds: Public ``(low, high)``.
            epsilon: Total ε of the release.
            noise: Noise family.
            level: Confidence level.
            gamma: Smoothness γ.
            delta: δ for ``noise="laplace"``.
            nulls: ``"zero"`` or ``"drop"``.
            name: Label of the release.
            grid: Public rounding step.
            uncertainty_share: Share of ε spent on the noise scale.
            form: ``"wide"`` or ``"long"``.
            cv: Wide form: add ``_cv`` and ``_flag``.

        Returns:
            The table (keys, ``{column}_median``, ...).

        Example:
            >>> import polars as pl, tabdp
            >>> c = tabdp.Curator(seed=1)
            >>> c.add("d", pl.DataFrame({"c": ["a"] * 3, "x": [1.0, 2.0, 3.0]}))
            >>> c.author_session("d").median("x", by="c", keys=tabdp.KeySet.from_dict(c=["a"]),
            ...                              bounds=(0, 5), epsilon=1.0, nulls="drop").height
            1
        """
        keys = self._keys(keys)
        with self._lock:
            return self._out(self._live().dp.median(
                column, by=by, keys=keys, bounds=bounds, epsilon=epsilon, noise=noise,
                session=self._session, level=level, gamma=gamma, delta=delta, nulls=nulls,
                name=name, grid=grid, uncertainty_share=uncertainty_share, form=form, cv=cv))

    def quantile(self, column: str, q: float, *, by: str | Sequence[str], keys: KeySet,
                 bounds: tuple[float, float], epsilon: float, noise: str = "polyplace",
                 level: float = DEFAULT_LEVEL, gamma: float | None = None,
                 delta: float | None = None, nulls: str = "error", name: str | None = None,
                 grid: Any = None, uncertainty_share: float | None = None,
                 form: str = "wide", cv: bool = False) -> Any:
        """Private q-quantiles per cell (see `quantile()`).

        Args:
            column: Measure column.
            q: Quantile level in [0, 1].
            by: Group-by column(s).
            keys: Public key set.
            bounds: Public ``(low, high)``.
            epsilon: Total ε of the release.
            noise: Noise family.
            level: Confidence level.
            gamma: Smoothness γ.
            delta: δ for ``noise="laplace"``.
            nulls: ``"zero"`` or ``"drop"``.
            name: Label of the release.
            grid: Public rounding step.
            uncertainty_share: Share of ε spent on the noise scale.
            form: ``"wide"`` or ``"long"``.
            cv: Wide form: add ``_cv`` and ``_flag``.

        Returns:
            The table (keys, ``{column}_q{100q}``, ...).

        Example:
            >>> import polars as pl, tabdp
            >>> c = tabdp.Curator(seed=1)
            >>> c.add("d", pl.DataFrame({"c": ["a"] * 3, "x": [1.0, 2.0, 3.0]}))
            >>> c.author_session("d").quantile("x", 0.9, by="c", bounds=(0, 5), epsilon=1.0,
            ...     keys=tabdp.KeySet.from_dict(c=["a"]), nulls="drop").columns[1]
            'x_q90'
        """
        keys = self._keys(keys)
        with self._lock:
            return self._out(self._live().dp.quantile(
                column, q, by=by, keys=keys, bounds=bounds, epsilon=epsilon, noise=noise,
                session=self._session, level=level, gamma=gamma, delta=delta, nulls=nulls,
                name=name, grid=grid, uncertainty_share=uncertainty_share, form=form, cv=cv))

    def summary(self, delta: float | None = None) -> dict[str, Any]:
        """The PUBLIC summary of the session (`to_dict()`).

        Args:
            delta: Optional δ at which the policy curves also state ε.

        Returns:
            Mechanisms, parameters, policy curves, key-set sizes, budget: nothing per record.

        Example:
            >>> import polars as pl
            >>> c = Curator()
            >>> c.add("d", pl.DataFrame({"x": [1.0]}))
            >>> c.author_session("d").summary()["session"]["mode"]
            'author'
        """
        return self._session.report(delta).to_dict()

    def __repr__(self) -> str:
        """Public: the names, the declared schema and the number of releases."""
        return (f"AuthorSession(name={self.name!r}, dataset={self.dataset!r}, "
                f"schema={self._schema}, releases={len(self._session.records)})")
