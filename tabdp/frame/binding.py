"""What the frame layer keeps about a session: engine, ledger kind, bound rows and frame.

A [`Session`][tabdp.Session] is the accountant: the privacy unit, the randomness, the budgets,
the ledger of per-record losses, the records and the reports. Everything the engines keep about
a session's releases lives here, in one `FrameBinding` per session (`of(session)`), decided
from the frames' classes and the public arguments (never their data):

* `use_engine`: the first release binds the session to its engine (Polars, or Spark with its
  own ledger); a later release of another engine is refused before any data is read.
* `choose_ledger`: row mode with ``streaming=None``: the first release's input decides the
  ledger (a LazyFrame: streaming, no per-row state; an eager frame: in memory). The session
  receives the ledger chosen through its ``ledger`` (settable before its first release only).
* `cached_snapshot` / `keep_snapshot`: the one evaluation of the last frame released, reused
  by a later release of the same frame object with the same grouping (a count after a sum).
* `FrameBinding.bind_rows` / `bound_columns` / `rows_bound`: row mode, the rows every release
  must read (their number and per-column fingerprints).
* `FrameBinding.bound` / `pinned` / `declared`, `bind_pinned`, `FrameBinding.declares_integer`:
  author mode, the one frame a session releases (bound by `tabdp.frame._author.bind_frame`),
  its pinned data and the schema the curator declared.
* `phase` / `FrameBinding.start_release` / `FrameBinding.data_read`: the phases of a release
  (the session's ``progress=``) and whether it has begun reading data (an author-mode failure
  after that is the generic `DataFailure`).

A session's binding lives as long as the session (a weak reference to the session keys it).

Example:
    >>> import tabdp
    >>> s = tabdp.Session()
    >>> choose_ledger(s, lazy_input=True)
    >>> s.streaming, type(s.ledger).__name__, of(s).streaming_choice
    (True, 'ReplayLedger', True)
"""

from __future__ import annotations

import sys
import time
import weakref
from collections.abc import Mapping
from typing import Any

from tabdp._numeric import integer_dtype
from tabdp._reserved import ROW_ID
from tabdp.exceptions import ColumnTypeError, InvalidParameterError
from tabdp.privacy.ledger import DenseLedger, ReplayLedger, id_kind

__all__ = ["FrameBinding", "of", "attach", "use_engine", "choose_ledger", "cached_snapshot",
           "keep_snapshot", "session_engine", "bind_pinned", "phase"]


class FrameBinding:
    """The frame layer's state of one session (see the module's docstring).

    Created with the session (`attach`) and found again with `of`. Nothing in it is shown to
    a query author: the row count and fingerprints, the pinned data and the failures' details
    are CONFIDENTIAL; the engine, the ledger's kind and the declared schema are public.

    Args:
        session: The [`Session`][tabdp.Session].
        streaming: The session's ``streaming=`` argument (``None``: decided by the first
            release's input).

    Example:
        >>> import tabdp
        >>> b = of(tabdp.Session(streaming=False))
        >>> b.streaming_choice, b.rows_bound, b.bound_columns()
        (False, None, [])
    """

    def __init__(self, session: Any, streaming: bool | None = None) -> None:
        """The state of a session that has read no data yet."""
        self._session = weakref.ref(session)
        #: The ledger asked for: True streaming, False per-row, None undecided (a streaming
        #: ledger needs one row per record: never chosen otherwise). PUBLIC.
        self.streaming_choice: bool | None = streaming if session.rows_one_cell else False
        #: The cached evaluation of the last frame released ({key: entry}).
        self.snapshot: dict[Any, dict[str, Any]] = {}
        # Row mode: the rows every release must read (count and per-column fingerprints).
        self._n_rows: int | None = None
        self._fingerprints: dict[str, int] = {}
        # Author mode: the one frame the session releases, its pinned data, the declared schema.
        self.bound: Any = None
        self.pinned: Any = None
        self.declared: dict[str, Any] | None = None
        #: Whether the current release has begun reading data (set by `phase`).
        self.data_read = False
        #: CONFIDENTIAL: (input frame, its row count) for the automatic partition count.
        self.rows_estimate: tuple[Any, int] | None = None
        #: Unit mode: the dtype of the unit column of the session's first release. PUBLIC.
        self.unit_dtype: Any = None
        #: The session's number of recorded releases when `unit_dtype` was set: while no
        #: release was recorded since, it came from releases refused (or still planned) and a
        #: new first release may set another (review r80).
        self.unit_dtype_at = 0
        self.t0 = time.monotonic()

    # -- row mode -----------------------------------------------------------------------------
    @property
    def rows_bound(self) -> int | None:
        """Row mode: the number of rows the session's releases read (``None`` before the first).

        Example:
            >>> import tabdp
            >>> of(tabdp.Session()).rows_bound is None
            True
        """
        return self._n_rows

    def bind_rows(self, n_rows: int, fingerprints: dict[str, int]) -> None:
        """Row mode: check that a release reads the session's rows, row for row.

        The first release binds the session to its rows: their number and, for every column it
        reads, an order-sensitive fingerprint (a hash of each row id with its value, summed).
        A later release fingerprints the columns it reads and every bound column again: it
        must read the same number of rows from a frame that holds every bound column with the
        same fingerprint (columns read for the first time are bound in turn). Losses are
        accounted by row id, so a reordered, filtered or changed frame would charge one
        record's loss to another: it is refused before any noise is drawn. (Two rows that agree
        on every bound column have been charged identically so far, so a frame that exchanges
        them is accepted: no loss can be misattributed.)

        Args:
            n_rows: Rows read by the release.
            fingerprints: Column name → fingerprint.

        Raises:
            InvalidParameterError: The rows differ from the session's.

        Example:
            >>> import tabdp
            >>> s = tabdp.Session()
            >>> b = of(s)
            >>> b.bind_rows(3, {"x": 42})
            >>> b.bind_rows(3, {"x": 42, "y": 7})
            >>> try:
            ...     b.bind_rows(3, {"x": 43, "y": 7})
            ... except ValueError as err:
            ...     print(str(err).splitlines()[0][:60])
            This session counts each row as a unit (row ids), but this f
        """
        session = self._session()
        if session is None:
            return
        # the release workflow's streaming sessions number the rows themselves (``ROW_ID``,
        # one record per row) and read the input once per pass: bound like row mode
        numbered = (session.unit == ROW_ID and session.streaming and session.rows_one_cell)
        if session.unit is not None and not numbered:
            return
        changed = sorted(c for c, f in fingerprints.items()
                         if c in self._fingerprints and self._fingerprints[c] != f)
        changed += sorted(c for c in self._fingerprints if c not in fingerprints)
        if (self._n_rows is not None and n_rows != self._n_rows) or changed:
            # no row counts: they are confidential (a filtered frame's count is a noiseless
            # counting query)
            what = ("it does not have the number of rows the session's earlier releases read"
                    if self._n_rows is not None and n_rows != self._n_rows
                    else f"column(s) {changed} do not hold the same values in the same rows")
            if numbered:  # (tabdp's own refusal, as every streaming session's; review r35)
                raise InvalidParameterError(
                    "The release's input changed while the release read it: a pass over the "
                    f"input did not read the rows the earlier passes read ({what}). Each row "
                    "is a record numbered by its position, so a rewritten, replaced or "
                    "reordered input would charge one record's loss to another; nothing was "
                    "written.\nHint: leave the input unchanged until the run ends (write a "
                    "new release's data to a new file or folder), then run again.")
            raise InvalidParameterError(
                "This session counts each row as a unit (row ids), but this frame's rows are "
                f"not the rows its earlier releases read: {what}. A reordered, filtered or "
                "changed frame would charge one record's loss to another, so nothing was "
                "drawn or recorded.\nHint: release the same frame in every call of the "
                "session, or create the session with unit='<id column>' to follow records "
                "across different frames.")
        if self._n_rows is None:
            self._n_rows = n_rows
            if not numbered:  # the workflow's replayed ledger lists the rows it reads
                _cover(session.ledger, n_rows)
        for c, f in fingerprints.items():
            self._fingerprints.setdefault(c, f)

    def bound_columns(self) -> list[str]:
        """Row mode: the columns earlier releases read (a release fingerprints them again).

        Returns:
            Column names in the order they were first bound (empty in unit mode).

        Example:
            >>> import tabdp
            >>> s = tabdp.Session()
            >>> b = of(s)
            >>> b.bind_rows(2, {"x": 1, "c": 2})
            >>> b.bound_columns()
            ['x', 'c']
        """
        return list(self._fingerprints)

    # -- unit mode ------------------------------------------------------------------------------
    def check_unit_dtype(self, unit: str, dtype: Any, records: int) -> None:
        """Unit mode: refuse a unit column of another kind than the session's first release's.

        Losses are added per unit id across releases, so ids must compare: integers of any
        width do (7 is one unit as Int32 and as Int64), text does whether the column is
        String, Categorical or Enum (compared as text, as a lifetime ledger keys it), and
        other dtypes only with themselves. A session whose releases met the text "7" and the
        integer 7 could not join its releases' ids: a budget failed with a raw Polars error
        and, without a budget, the release was recorded and every later ``report()`` failed
        (reviews r77, r79). Decided from the schema alone, before any data is read.

        Args:
            unit: The unit column.
            dtype: Its Polars dtype in this release's input.
            records: The session's number of recorded releases. A dtype set while no release
                was recorded since (a first release refused after this check, e.g. for its
                key set) does not bind the next release.

        Raises:
            ColumnTypeError: The dtype is of another kind than the first release's.

        Example:
            >>> import polars as pl, tabdp
            >>> b = of(tabdp.Session(unit="id"))
            >>> b.check_unit_dtype("id", pl.Int64, 0)  # a first release, then recorded
            >>> b.check_unit_dtype("id", pl.UInt64, 1)
            >>> try:
            ...     b.check_unit_dtype("id", pl.String, 1)
            ... except TypeError as err:
            ...     print(str(err)[:40])
            unit column 'id' is String in this frame
        """
        first = self.unit_dtype
        if first is None or records <= self.unit_dtype_at:
            self.unit_dtype, self.unit_dtype_at = dtype, records
            return
        if dtype == first or id_kind(dtype) == id_kind(first) != "other":
            return
        raise ColumnTypeError(
            f"unit column {unit!r} is {dtype} in this frame but {first} in the session's "
            "first release; a unit's losses are added by its id across releases, and ids of "
            "two kinds cannot be matched (the text '7' is not the integer 7; integers of any "
            "width are one kind, and so is text: String, Categorical or Enum), so nothing was "
            "read, drawn or recorded.\nHint: cast the unit column to one type in every "
            f"release of the session (e.g. pl.col({unit!r}).cast({first!s})), or use one "
            "session per id type.")

    # -- author mode ----------------------------------------------------------------------------
    def declares_integer(self, column: str) -> bool:
        """Whether a sum of ``column`` may return integer estimates (public: never the data).

        In curator mode the frame's dtype decides. In author mode only a schema the curator
        declared does (`Curator`): the dtype of a frame can follow its contents
        (pandas makes an integer column float as soon as one value is missing, and a Parquet
        file written by pandas keeps that), so an undeclared sum returns Float64 estimates.

        Args:
            column: A measure column.

        Returns:
            ``True`` in curator mode (the frame's dtype decides), else whether the declared
            schema gives ``column`` an integer dtype.

        Example:
            >>> import tabdp
            >>> curator, author = tabdp.Session(), tabdp.Session(mode="author")
            >>> of(curator).declares_integer("x"), of(author).declares_integer("x")
            (True, False)
        """
        session = self._session()
        if session is None or session.mode != "author":
            return True
        if self.declared is None or column not in self.declared:
            return False
        return bool(integer_dtype(self.declared[column]))

    # -- the data phase of a release ----------------------------------------------------------
    def start_release(self) -> None:
        """Mark the start of a release call: no data read yet (see `data_read`).

        Everything before the release's first `phase` is data-free (arguments, schema, key
        set, rules); an author-mode failure after it is the generic `DataFailure`.

        Example:
            >>> import tabdp
            >>> s = tabdp.Session()
            >>> phase(s, "q1_sum", "reading"); of(s).start_release(); of(s).data_read
            False
        """
        self.data_read = False


#: Session -> its binding; an entry dies with its session.
_BINDINGS: weakref.WeakKeyDictionary[Any, FrameBinding] = weakref.WeakKeyDictionary()


def attach(session: Any, *, streaming: bool | None = None, frame: Any = None,
           pinned: Any = None) -> FrameBinding:
    """Give a new session its binding (the Session's constructor calls it).

    Args:
        session: The new [`Session`][tabdp.Session].
        streaming: Its ``streaming=`` argument.
        frame: Author mode: the curator's frame (``data=``), or ``None``.
        pinned: Its data, pinned by the constructor.

    Returns:
        The session's binding.

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(mode="author", data=pl.DataFrame({"x": [1]}))
        >>> of(s).pinned.collect().height
        1
    """
    out = FrameBinding(session, streaming)
    if frame is not None:
        out.bound, out.pinned = frame, pinned
    _BINDINGS[session] = out
    return out


def of(session: Any) -> FrameBinding:
    """The frame layer's state of ``session`` (a fresh one for a session that has none).

    Args:
        session: A [`Session`][tabdp.Session].

    Returns:
        Its `FrameBinding`.

    Example:
        >>> import tabdp
        >>> s = tabdp.Session()
        >>> of(s) is of(s)
        True
    """
    found = _BINDINGS.get(session)
    if found is None:
        found = _BINDINGS[session] = FrameBinding(session, None)
    return found


def _cover(ledger: Any, n_rows: int) -> None:
    """A row-mode ledger reports every row read, charged or not (0.0 for the others)."""
    if isinstance(ledger, DenseLedger):
        ledger.cover(n_rows)


def reading(session: Any) -> None:
    """Mark the session's release as reading data from now on, without a progress line.

    The pipeline calls it before it hands a release to its engine (`tabdp.frame.pipeline`):
    whatever the engine does from then on may touch the data, so in author mode a failure
    there is the generic `tabdp.DataFailure` (its details for the curator), on every engine,
    even where an engine would run a job before its first progress line (`phase`).

    Args:
        session: The release's [`Session`][tabdp.Session].

    Example:
        >>> import tabdp
        >>> s = tabdp.Session()
        >>> reading(s); of(s).data_read
        True
    """
    of(session).data_read = True


def phase(session: Any, name: str, what: str) -> None:
    """Report that release ``name`` enters phase ``what`` (the session's ``progress=``).

    Every phase reads (or follows the reading of) the data: the release's binding is marked
    as having read data (`FrameBinding.data_read`).

    Args:
        session: The release's [`Session`][tabdp.Session].
        name: The release's label.
        what: The phase, e.g. ``"reading and aggregating the input"``.

    Example:
        >>> import tabdp
        >>> seen = []
        >>> s = tabdp.Session(progress=lambda name, what: seen.append((name, what)))
        >>> phase(s, "q1_sum", "drawing noise")
        >>> seen, of(s).data_read
        ([('q1_sum', 'drawing noise')], True)
    """
    b = of(session)
    b.data_read = True
    progress = session.progress
    if progress is False:
        return
    if progress is True:
        sys.stderr.write(f"[tabdp {time.monotonic() - b.t0:7.1f}s] {name}: {what}\n")
        sys.stderr.flush()
        return
    progress(name, what)


def bind_pinned(session: Any, native: Any, pinned: Any, declared: Mapping[str, Any]) -> None:
    """Author mode: bind ``native`` with data the curator pinned (`Curator`).

    Args:
        session: An author-mode [`Session`][tabdp.Session] bound to no frame yet.
        native: The curator's frame.
        pinned: Its pinned data.
        declared: The dataset's declared schema (column -> Polars dtype), public.

    Raises:
        InvalidParameterError: The session is not in author mode, or already bound.

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(mode="author")
        >>> df = pl.DataFrame({"x": [1]})
        >>> bind_pinned(s, df, df.lazy(), {"x": pl.Int64})
        >>> of(s).declares_integer("x")
        True
    """
    b = of(session)
    if session.mode != "author" or b.bound is not None:
        raise InvalidParameterError(
            "bind_pinned: only an unbound author-mode session takes pinned data.")
    b.bound, b.pinned = native, pinned
    b.declared = dict(declared)


def session_engine(session: Any) -> str | None:
    """The engine a session's releases are bound to: ``"spark"``, ``"polars"`` or ``None``.

    A session is bound by its first release: to Spark when its ledger lives in Spark, else to
    Polars (pandas and Polars frames) once it holds a release.

    Args:
        session: A [`Session`][tabdp.Session].

    Returns:
        ``"spark"``, ``"polars"``, or ``None`` before the first release.

    Example:
        >>> import tabdp
        >>> session_engine(tabdp.Session()) is None
        True
    """
    if getattr(session.ledger, "engine", None) == "spark":
        return "spark"
    return "polars" if session.records else None


def use_engine(session: Any, engine: str, ledger: Any = None) -> None:
    """Bind a session to the engine of its releases (before any data is read).

    The first release decides: a Spark release installs ``ledger`` (its Spark ledger: the
    releases' definitions replayed in Spark in row mode, a Spark table of per-unit losses
    otherwise) in a session with no releases yet; every later release must use the same
    engine, since the ledger lives in one engine.

    Args:
        session: A [`Session`][tabdp.Session].
        engine: ``"spark"`` or ``"polars"`` (pandas and Polars frames).
        ledger: The Spark ledger to install (first Spark release only).

    Raises:
        InvalidParameterError: The session already holds releases of the other engine.

    Example:
        >>> import tabdp
        >>> s = tabdp.Session()
        >>> use_engine(s, "polars")
        >>> session_engine(s) is None      # bound by its first recorded release
        True
    """
    current = session_engine(session)
    if current is None and engine == "spark" and ledger is not None:
        session.ledger = ledger
        return
    if current is not None and current != engine:
        raise InvalidParameterError(
            f"this session's releases ran on {current} frames and this one is a {engine} "
            f"frame; a session keeps its ledger in one engine, so it cannot mix them.\n"
            "Hint: use one session per engine, or convert the frame (e.g. "
            "spark_df.toPandas() or spark.createDataFrame(pandas_df)).")


def choose_ledger(session: Any, lazy_input: bool) -> None:
    """Row mode, ``streaming=None``: the first release's input decides the session's ledger.

    A LazyFrame (an input that may be larger than memory) gives a streaming ledger, which
    keeps no per-row state; an eager frame (already in memory) the in-memory ledger, which
    lets a later release of the same frame reuse its snapshot. Decided from the input's type
    only, before any data is read, and never changed after the first release.

    Args:
        session: A [`Session`][tabdp.Session].
        lazy_input: Whether the release's input is a Polars LazyFrame.

    Example:
        >>> import tabdp
        >>> s = tabdp.Session()
        >>> choose_ledger(s, False)
        >>> s.streaming, of(s).streaming_choice
        (False, False)
    """
    b = of(session)
    if b.streaming_choice is None and not session.records:
        if lazy_input:
            session.ledger = ReplayLedger()
        b.streaming_choice = lazy_input


def cached_snapshot(session: Any, key: Any) -> dict[str, Any] | None:
    """The evaluation of an input kept from the session's last release, if it matches.

    The frame engine keeps one evaluation (snapshot) of the last frame it released, so a
    later release of the same frame object with the same grouping (a count after a sum)
    reads the input once. The engine decides whether the entry is still usable.

    Args:
        session: A [`Session`][tabdp.Session].
        key: The engine's key (frame identity, grouping, unit, rules).

    Returns:
        The entry stored by `keep_snapshot` under ``key``, or ``None``.

    Example:
        >>> import tabdp
        >>> s = tabdp.Session()
        >>> keep_snapshot(s, ("f", ("c",)), {"rows": 3})
        >>> cached_snapshot(s, ("f", ("c",))), cached_snapshot(s, "other")
        ({'rows': 3}, None)
    """
    return of(session).snapshot.get(key)


def keep_snapshot(session: Any, key: Any, entry: dict[str, Any]) -> None:
    """Keep ``entry`` as the session's one cached input evaluation (replacing any other).

    Args:
        session: A [`Session`][tabdp.Session].
        key: The engine's key.
        entry: What the engine needs to reuse the evaluation.

    Example:
        >>> import tabdp
        >>> s = tabdp.Session()
        >>> keep_snapshot(s, 1, {}); keep_snapshot(s, 2, {"x": 1})
        >>> cached_snapshot(s, 1) is None
        True
    """
    of(session).snapshot = {key: entry}
