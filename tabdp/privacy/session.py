"""Sessions: the privacy unit, the randomness, the budget and the ledger of releases."""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from tabdp._numeric import add_up, floats_quiet, increasing, mul_up
from tabdp._reserved import REPORT_COLUMNS, ROW_ID, is_reserved, report_clash
from tabdp.exceptions import InvalidParameterError, PrivacyWarning
from tabdp.privacy.accounting import COMPONENTS, epsilon_at
from tabdp.privacy.budget import Budget
from tabdp.privacy.conversions import check_dp_delta, statement_delta_problem
from tabdp.privacy.filter import individual_filter
from tabdp.privacy.ledger import (
    PER_RECORD_PARQUET,
    POLICY_GRID,
    Charges,
    DenseLedger,
    QueryRecord,
    ReplayLedger,
    UnitLedger,
    UnitLosses,
    _num,
    common_ids,
    dense,
    loss_components,
    sorted_positions,
)
from tabdp.rng import RandomSource

__all__ = ["Session", "Report", "last_session", "total_policy_curve", "individual_filter"]

_LAST = threading.local()


def last_session() -> Session | None:
    """The session of the most recent one-off release (a call made with ``session=None``).

    Each ``df.dp.sum(...)`` / ``df.dp.count(...)`` call without ``session=`` runs in a fresh
    session of its own; this returns it (per thread) until the next one-off call replaces it, so
    ``tabdp.last_session().report()`` gives that release's report.

    Returns:
        The session, or ``None`` if no one-off release was made in this thread.

    Example:
        >>> import polars as pl, tabdp
        >>> df = pl.DataFrame({"c": ["a", "b"], "x": [1.0, 2.0]})
        >>> keys = tabdp.KeySet.from_dict(c=["a", "b"])
        >>> _ = df.dp.count(by=["c"], keys=keys, mechanism=tabdp.mechanisms.Gaussian(1.0))
        >>> tabdp.last_session().report().per_record.height
        2
    """
    return getattr(_LAST, "session", None)


def _set_last(session: Session) -> None:
    _LAST.session = session


class Session:
    """A privacy session: unit, randomness, optional per-record budget and ledger.

    Args:
        unit: Column identifying the privacy unit (e.g. ``"estab_id"``: all rows of an
            establishment form one unit). ``None``: each row is a unit, identified by its row
            id (its position in the frame as read); every release of the session must then
            read the same rows in the same order: a release over a reordered, filtered or
            changed frame is refused before any noise is drawn (use ``unit=`` to follow records
            across different frames).
        seed: ``None`` (default) for secure OS randomness. An int makes noise reproducible:
            **for tests only**; the report marks the session as not for production.
        budget: Optional public limit on each unit's PRzCDP ρ: a number, a ``{size: rho}``
            curve, ``{currency: curve}`` or [`tabdp.Budget`][tabdp.Budget]. It is enforced as an
            individual filter: a unit whose loss would pass its limit is left out of that
            query (the query runs; how many units were left out is confidential).
        mode: ``"curator"`` (default): the caller may see the data; bad values under a strict
            rule (``nulls="error"``...) raise `DataValidationError` with a generic
            message (details in its ``confidential`` attribute). ``"author"``: the caller may
            not see the microdata (e.g. behind a validation server): every rule must be declared
            (``nulls="zero"`` or ``"drop"``, a sum's ``negatives=``: the default ``"error"``
            is refused from the arguments), and
            no release raises, warns or returns anything that depends on the data except
            through the noise: a failure after a release began reading data is the one
            `DataFailure` (details in the confidential summary), a key set read
            from the data is refused, and sums return Float64 estimates unless the curator
            declared an integer dtype. An author-mode session is bound to ONE frame, the
            curator's (``data=``, or the frame of its first release), whose data is pinned at
            binding: every release must pass that same object (a derived, relabelled,
            filtered or reordered frame is refused whatever the data, so a refusal reveals
            nothing). This session is the curator's object (its report holds per-record
            losses): query authors get a `AuthorSession` from a
            `Curator`, which also pins declared columns in declared dtypes.
        data: Author mode: the curator's frame the session releases (pandas, Polars DataFrame
            or LazyFrame, PySpark DataFrame), pinned now (a LazyFrame is evaluated, a Spark
            frame checkpointed); a failure to pin it is raised to the caller as it is.
        track_cells: Keep a CONFIDENTIAL per-cell audit of each release (the largest loss of
            one unit in each cell, in ``QueryRecord.cells``), as the release workflow's
            confidential report does. Off by default (it costs a group-by per release).
        progress: Report the phases of each release as they start (reading and aggregating
            the input, accounting losses, drawing noise): ``True`` writes one line per phase
            with the elapsed time to stderr; a callable receives ``(release name, phase)``.
            The phases are the same for every dataset; only their timing depends on the data
            (timing is outside tabdp's guarantee: see docs/privacy-semantics.md).
        streaming: Row mode only. ``True``: keep no per-row state; the ledger holds each
            release's public definition and recomputes every record's losses from the input
            (one streaming pass per release, memory independent of the number of rows; see
            docs/privacy-semantics.md, "Streaming sessions"). ``False``: the in-memory ledger
            (a later release of the same frame reuses its snapshot). ``None`` (default): decided
            by the first release's input: a Polars ``LazyFrame`` streams, an eager frame does
            not. Tables and losses are identical either way. On Spark (PySpark DataFrames) row
            mode replays its releases in Spark unless ``streaming=False``, which keeps a Spark
            table with one row per input row (docs/spark.md, "What is held where").
        ledger: A lifetime ledger ([`tabdp.Ledger`][tabdp.Ledger]) of a release series: every
            query also leaves out each unit whose lifetime loss (stored past releases plus this
            session's) would pass the series' lifetime budget, and the session's losses are
            committed to it. Needs ``unit=`` (row positions do not identify a record across
            runs); pandas, Polars and Spark frames (docs/spark.md: what reaches the
            driver). A ledger opened with ``read_only=True`` is refused (its charges would
            be committed nowhere): it is ``tabdp compare``'s, whose DP side is never published.
        unit_partitions: Unit mode, pandas and Polars frames: read each release's input in
            this many passes, each over the units whose id hashes to it (every unit's rows in
            one pass), so the (unit, cell) table and the charges computed from it are held for
            one part of the units at a time. ``None`` (default): 1 unless the input's rows,
            at about 400 bytes each, would take more than a quarter of the memory available
            (then enough parts for each to fit). Tables, losses and reports are identical
            for every value; only time and memory change (docs/performance.md, "Memory at
            scale").

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(unit=None, seed=1, budget=1.0)
        >>> df = pl.DataFrame({"c": ["a", "a", "b"], "x": [1.0, 2.0, 3.0]})
        >>> keys = tabdp.KeySet.from_dict(c=["a", "b"])
        >>> out = df.dp.count(by=["c"], keys=keys, mechanism=tabdp.mechanisms.Gaussian(2.0),
        ...                   session=s)
        >>> s.report().per_record["rho"].to_list()
        [0.125, 0.125, 0.125]
    """

    def __init__(self, unit: str | None = None, seed: int | None = None,
                 budget: float | Mapping[Any, Any] | Budget | None = None,
                 mode: str = "curator", data: Any = None, *, track_cells: bool = False,
                 progress: bool | Callable[[str, str], None] = False,
                 streaming: bool | None = None, ledger: Any = None,
                 unit_partitions: int | None = None, _row_ids: bool = False,
                 _rows_one_cell: bool = True, _read_only_ledger: bool = False) -> None:
        """Check the parameters.

        ``_row_ids``: the caller numbered the rows itself (the release workflow);
        ``_rows_one_cell``: with such row ids, whether the caller's joins keep one row per
        record (decided from PUBLIC inputs only: the release states each record in one cell as
        a public contribution bound only then); ``_read_only_ledger``: accept a ledger opened
        ``read_only=True`` (only ``tabdp compare``'s DP side, through the release workflow's
        internal ``_ledger_read_only``: its outputs are marked not for publication).
        """
        if streaming is not None and not isinstance(streaming, bool):
            raise InvalidParameterError(
                f"Session: streaming must be True, False or None; got {streaming!r}.\nHint: "
                "Session(streaming=True) keeps no per-row state in memory (row mode); None "
                "decides from the first release's input (a LazyFrame: streaming).")
        if streaming and unit is not None and not (_row_ids and unit == ROW_ID_COLUMN):
            raise InvalidParameterError(
                f"Session: streaming=True is for row mode (unit=None); got unit={unit!r}.\n"
                "Hint: in unit mode the ledger is kept per unit (its size follows the number "
                "of units, not rows); drop streaming=True, or use unit=None.")
        # one row per record (public): a streaming ledger charges each row as its own record
        rows_one_cell = unit is None or (
            bool(_row_ids) and unit == ROW_ID_COLUMN and bool(_rows_one_cell))
        if streaming and not rows_one_cell:
            raise InvalidParameterError(
                "Session: streaming=True charges each row as its own record, but the caller's "
                "row ids may repeat (_rows_one_cell=False: joins that may repeat a row).\n"
                "Hint: drop streaming=True; the in-memory ledger counts repeated rows as one "
                "record.")
        if unit is not None and (not isinstance(unit, str) or not unit):
            raise InvalidParameterError(
                f"Session: unit must be a column name or None; got {unit!r}.\n"
                "Hint: Session(unit='estab_id') groups all rows of an establishment.")
        if unit is not None and is_reserved(unit) and not (
                _row_ids and unit == ROW_ID_COLUMN):
            raise InvalidParameterError(
                "Session: unit column names starting with '__tabdp' (in any letter case) are "
                f"reserved for tabdp's own row ids; got {unit!r}.\nHint: rename the column, or "
                "use unit=None for row ids that tabdp assigns itself.")
        if unit is not None and unit.lower() in REPORT_COLUMNS:
            raise InvalidParameterError(
                f"Session: the unit column's name {unit!r} is the name of a column of the "
                "per-record report (rho, epsilon, size, epsilon_delta, rho_lifetime; in any "
                "letter case, as Spark resolves names), which lists each unit's id under its "
                "column's name.\nHint: rename the unit column before the release (e.g. to "
                "'unit_id').")
        if unit_partitions is not None and (
                isinstance(unit_partitions, bool) or not isinstance(unit_partitions, int)
                or not 1 <= unit_partitions <= 4096):
            raise InvalidParameterError(
                f"Session: unit_partitions must be an integer from 1 to 4096 or None; got "
                f"{unit_partitions!r}.\nHint: Session(unit='firm_id', unit_partitions=8) reads "
                "each release's input in 8 passes of one eighth of the units; None decides "
                "from the input's size and the memory available.")
        #: Unit mode: passes over the input per release, each over one part of the units
        #: (None: decided from the input's rows and the memory available). PUBLIC setting.
        self.unit_partitions = unit_partitions
        if mode not in MODES:
            raise InvalidParameterError(
                f"Session: mode must be one of {MODES}; got {mode!r}.\nHint: 'curator' when "
                "the caller may see the data, 'author' for query authors who may not.")
        self.unit = unit
        self.seed = seed
        self.mode = mode
        #: The lifetime ledger of a release series (CONFIDENTIAL contents), or ``None``.
        self.lifetime = _check_lifetime(ledger, unit, _row_ids, _read_only_ledger)
        #: Releases of the series committed before this session (public).
        self._lifetime_before = None if self.lifetime is None else self.lifetime.releases
        #: PUBLIC: every record is one row of the released frame (row mode, or row ids given
        #: with joins that keep one row per record), so each release bounds a record to one
        #: cell. Never decided from the data.
        self.rows_one_cell = rows_one_cell
        self.rng = RandomSource(seed)
        self.budget = Budget.coerce(budget)
        #: Keep a CONFIDENTIAL per-cell audit of each release (worst loss of one unit per cell,
        #: in ``QueryRecord.cells``); used by the release workflow's confidential report.
        self.track_cells = bool(track_cells)
        if not (isinstance(progress, bool) or callable(progress)):
            raise InvalidParameterError(
                f"Session: progress must be True, False or a callable (name, phase); got "
                f"{progress!r}.\nHint: Session(progress=True) prints each release's phases.")
        #: The ``progress=`` setting: False, True (stderr) or a callable (name, phase).
        self.progress = progress
        self.records: list[QueryRecord] = []
        self.backend = "polars"
        #: CONFIDENTIAL: author-mode calls that failed after reading data (curator only).
        self._failures: list[dict[str, str]] = []
        # The ledger: per unit (row id in row mode), its loss components and, under a curve
        # budget, its spent rho and size per currency ("rho@<currency>", "size@<currency>").
        #: Row mode without per-row state: the ledger holds each release's public definition
        #: and recomputes every record's losses from the data (tabdp.frame._stream).
        self.streaming = bool(streaming)
        self._ledger: Any = (
            ReplayLedger() if streaming else
            DenseLedger() if unit is None or unit == ROW_ID_COLUMN else UnitLedger())
        # What the frame layer keeps about the session's releases (engine, ledger kind, bound
        # rows, author mode's one frame): tabdp.frame.binding; data= is pinned now.
        pinned = None
        if data is not None:
            if mode != "author":
                raise InvalidParameterError(
                    "Session: data= binds an author-mode session to the curator's frame; this "
                    "session is in curator mode.\nHint: Session(mode='author', data=frame), or "
                    "pass frames to each release in curator mode.")
            if not _is_frame(data):
                raise InvalidParameterError(
                    f"Session: data= must be a pandas, Polars or PySpark DataFrame (or a Polars "
                    f"LazyFrame); got {type(data).__name__}.\nHint: pass the curator's frame, "
                    "or use tabdp.Curator, which also reads Parquet paths.")
            # pinned by the curator's own call: a failure is raised plainly, to the curator
            pinned = _pin_frame(data)
        from tabdp.frame import binding

        binding.attach(self, streaming=streaming, frame=data, pinned=pinned)

    # -- names --------------------------------------------------------------------------------
    def release_name(self, requested: str | None, kind: str) -> str:
        """The label of the next release (checked before any data is read).

        Args:
            requested: The caller's name, or ``None`` for ``q<i>_<kind>``.
            kind: ``"sum"``, ``"count"``, ``"median"`` or ``"quantile"``.

        Returns:
            A name unique in the session.

        Raises:
            InvalidParameterError: A malformed or already used name.

        Example:
            >>> Session().release_name(None, "sum")
            'q1_sum'
        """
        used = sorted(r.name for r in self.records)
        taken = {n.lower() for n in used}
        if requested is not None:
            if not isinstance(requested, str) or not re.fullmatch(r"[A-Za-z0-9_]+", requested):
                raise InvalidParameterError(
                    f"name must be letters, digits and '_'; got {requested!r}.")
            if requested.lower() in taken:
                raise InvalidParameterError(
                    f"name {requested!r} is already used in this session (names are compared "
                    "in any letter case, as Spark resolves column names); names label the "
                    f"per-record report columns. Used: {used}.\nHint: give the release "
                    "another name (name=...).")
            clash = self._report_clash(requested)
            if clash is not None:
                raise InvalidParameterError(
                    f"name {requested!r}: {clash}.\nHint: rename the release (name=...), or "
                    "the unit column if the two meet.")
            return requested
        i = len(self.records) + 1
        name = f"q{i}_{kind}"
        while name.lower() in taken or self._report_clash(name) is not None:
            i += 1
            name = f"q{i}_{kind}"
        return name

    def _report_clash(self, name: str) -> str | None:
        """Why release ``name``'s column of the per-record report meets another, or ``None``.

        `tabdp._reserved.report_clash`, the rule the spec's checks apply too.
        """
        return report_clash(name, self.unit, self.lifetime is not None,
                            losses="this release's losses")

    def set_as_last(self) -> None:
        """Make this session the one [`tabdp.last_session`][tabdp.last_session] returns.

        A release without ``session=`` runs in a fresh session, which it hands over this way
        so that its report can be read afterwards.

        Example:
            >>> s = Session()
            >>> s.set_as_last()
            >>> last_session() is s
            True
        """
        _set_last(self)

    # -- author mode: failures ------------------------------------------------------------------
    def record_failure(self, details: Mapping[str, str]) -> None:
        """Keep the CONFIDENTIAL details of a failed author-mode call (for the curator).

        They appear in ``report().confidential_summary()["author_failures"]``.

        Args:
            details: ``{"during", "error", "traceback"}`` (the frame layer's author mode).

        Example:
            >>> s = Session(mode="author")
            >>> s.record_failure({"during": "x", "error": "E: 1", "traceback": ""})
            >>> s.report().confidential_summary()["author_failures"][0]["error"]
            'E: 1'
        """
        self._failures.append(dict(details))

    # -- the ledger ---------------------------------------------------------------------------
    @property
    def ledger(self) -> Any:
        """The per-unit ledger (CONFIDENTIAL losses): a Polars-backed ledger, or the Spark one.

        The frame layer decides which kind of ledger the engine of the session's releases keeps
        (`tabdp.frame.binding`, from the frames' classes only) and sets it here before the
        first release; the session refuses a new ledger once it holds releases (their losses
        are in the old one), and a streaming ledger (`ReplayLedger`, one row per record) for
        records that are not one row each.

        Example:
            >>> type(Session(unit="id").ledger).__name__
            'UnitLedger'
            >>> s = Session()
            >>> s.ledger = ReplayLedger()
            >>> s.streaming
            True
        """
        return self._ledger

    @ledger.setter
    def ledger(self, ledger: Any) -> None:
        if self.records:
            raise InvalidParameterError(
                "Session.ledger: this session already holds releases, whose losses are in its "
                "ledger; a ledger is set before the first release.\nHint: start a new session.")
        if isinstance(ledger, ReplayLedger):
            if not self.rows_one_cell:
                raise InvalidParameterError(
                    "Session.ledger: a streaming ledger charges each row as its own record, but "
                    "this session's records are not one row each.\nHint: keep the session's "
                    "own ledger.")
            self.streaming = True
        self._ledger = ledger

    # -- the filter ---------------------------------------------------------------------------
    def admit(self, charges: Charges,
              lookup: Callable[[Any, list[str]], dict[str, np.ndarray]] | None = None
              ) -> dict[str, np.ndarray]:
        """Apply the budget as an individual filter to a query's charges.

        A thin wrapper over `tabdp.privacy.filter.individual_filter` (the
        one filter every engine uses) that reads the units' earlier losses from the ledger.

        A unit is admitted when its loss after the query stays within its limit: under a
        constant budget, its total ρ over all currencies (admitted or left out of the whole
        query); under a curve budget, per currency, its ρ in that currency against the curve at
        its size there (the largest contribution so far, this query included). A NaN loss is
        never within a limit. The decision for a unit reads only that unit's charges and ledger.

        Args:
            charges: The query's charges per unit and currency.
            lookup: Where the units' earlier losses are read, ``lookup(units, columns)`` (the
                ledger's own ``lookup`` by default; a streaming release passes the totals it
                recomputed for a batch of rows).

        Returns:
            Currency → boolean mask over ``charges.units`` (True: admitted).

        Example:
            >>> s = Session(budget=1.0)
            >>> ch = Charges(np.array([0, 1]), {"x": np.array([0.5, 2.0])},
            ...              {"x": np.full(2, np.inf)}, {"x": np.array([1.0, 4.0])})
            >>> s.admit(ch)["x"].tolist()
            [True, False]
        """
        look = self._ledger.lookup if lookup is None else lookup
        out = individual_filter(self.budget, charges, look)
        lifetime = getattr(self, "lifetime", None)
        if lifetime is not None:  # the same filter over the series: stored + this run's losses
            life = individual_filter(lifetime.budget, charges, lifetime.lookup_lifetime())
            out = {c: out[c] & life[c] for c in out}
        return out

    def check_budget(self, losses: UnitLosses) -> None:
        """Deprecated: budgets are an individual filter now and never refuse a query.

        Kept for one release; it raises nothing. Use [`admit`][tabdp.Session.admit].

        Args:
            losses: Ignored.

        Example:
            >>> import warnings
            >>> with warnings.catch_warnings():
            ...     warnings.simplefilter("ignore")
            ...     Session(budget=1.0).check_budget(None)
        """
        warnings.warn("Session.check_budget is deprecated: budgets are enforced as an "
                      "individual filter (Session.admit) and never refuse a query.",
                      DeprecationWarning, stacklevel=2)

    # -- recording ----------------------------------------------------------------------------
    def record_release(self, record: QueryRecord, backend: str,
                       charges: Charges | None = None,
                       admitted: dict[str, np.ndarray] | None = None, *,
                       lifetime: tuple[Any, dict[str, np.ndarray], dict[str, np.ndarray]]
                       | None = None) -> None:
        """Add a release to the ledger (its admitted losses) and to the records.

        Args:
            record: The release; ``record.losses`` are its admitted per-unit losses.
            backend: ``"pandas"`` or ``"polars"`` (the library reports are returned in).
            charges: The query's charges (for curve budgets' per-currency ledger columns).
            admitted: The filter's decision on ``charges``.
            lifetime: An engine that keeps its losses outside the session (Spark): the
                admitted units' lifetime charges, ``(units, sums, maxes)`` with the columns
                `_charge_lifetime` builds from ``record.losses`` (collected from the engine).

        Example:
            >>> from tabdp.mechanisms import Gaussian
            >>> s = Session(unit="id")
            >>> r = QueryRecord(1, "q1", "count", ("count",), (), Gaussian(1.0), {}, 0.9,
            ...                 "error", UnitLosses(pl.Series(["a"]), np.array([0.5]),
            ...                                     np.array([np.inf]), np.array([1.0])))
            >>> s.record_release(r, "polars")
            >>> s.report().per_record["rho"].to_list()
            [0.5]
        """
        losses = record.losses
        self.backend = backend
        if losses is not None and losses.n:
            # (row mode's ledger only reads the zero components: views of one 0.0)
            comps = loss_components(losses, isinstance(self._ledger, DenseLedger))
            self._ledger.add(losses.units, {c: comps[c] for c in COMPONENTS if c != "size"},
                             {"size": comps["size"]})
        if (charges is not None and admitted is not None and charges.n
                and self.budget is not None and self.budget.per_currency):
            for c in charges.currencies:
                ok = admitted[c]
                units = charges.units[ok] if isinstance(charges.units, np.ndarray) else \
                    charges.units.filter(pl.Series(ok))
                self._ledger.add(units, {f"rho@{c}": charges.rho[c][ok]},
                                 {f"size@{c}": charges.size[c][ok]})
        self.records.append(record)
        if self.lifetime is not None:
            self._charge_lifetime(record, charges, admitted, lifetime)

    def _charge_lifetime(self, record: QueryRecord, charges: Charges | None,
                         admitted: dict[str, np.ndarray] | None,
                         given: tuple[Any, dict[str, np.ndarray], dict[str, np.ndarray]]
                         | None = None) -> None:
        """Add a release's admitted losses to the lifetime ledger (and commit if it autocommits).

        The same columns as the session's ledger, and ``rho@c`` / ``size@c`` per currency
        (the lifetime budget may be a curve whatever the per-run budget is). ``given``: the
        same columns, computed by an engine that keeps the losses (Spark).
        """
        led = self.lifetime
        assert led is not None
        from tabdp.frame import binding

        # the series' id type from this release's schema, whoever it charged (review r83)
        led.note_unit_type(binding.of(self).unit_dtype)
        led.pending_releases.append(record)  # its curves go with the next commit
        losses = record.losses
        if given is not None:
            if len(given[0]):
                led.charge(*given)
        elif losses is not None and losses.n:
            comps = _components(losses)
            sums = {c: comps[c] for c in COMPONENTS if c != "size"}
            maxes = {"size": comps["size"]}
            within = None  # the units the filter looked up, and those it admitted
            if charges is not None and admitted is not None and charges.n:
                # one part per release: per currency, aligned with the admitted units (a
                # currency a unit was left out of adds 0.0 to its rho and 0 to its size max)
                any_ok = np.zeros(charges.n, dtype=bool)
                for ok in admitted.values():
                    any_ok |= ok
                every = bool(any_ok.all())
                if not every and isinstance(charges.units, pl.Series):
                    within = (charges.units, any_ok)
                for c in charges.currencies:
                    if every and bool(admitted[c].all()):  # nobody left out: the charges
                        # themselves (the same doubles; no gather, no copy)
                        sums[f"rho@{c}"] = charges.rho[c]
                        maxes[f"size@{c}"] = charges.size[c]
                        continue
                    # the kept units' charges (a new array each), 0.0 where this currency
                    # left the unit out: ``np.where(ok, charge, 0.0)`` without a second array
                    ok = np.broadcast_to(np.asarray(admitted[c], dtype=bool),
                                         (charges.n,))[any_ok]
                    src_r = np.asarray(charges.rho[c], dtype=np.float64)
                    src_s = np.asarray(charges.size[c], dtype=np.float64)
                    rho_c = src_r.copy() if every else src_r[any_ok]
                    size_c = src_s.copy() if every else src_s[any_ok]
                    out = np.flatnonzero(~ok)
                    rho_c[out] = 0.0
                    size_c[out] = 0.0
                    sums[f"rho@{c}"] = rho_c
                    maxes[f"size@{c}"] = size_c
            elif led.budget.per_currency:
                from tabdp.exceptions import TabdpInternalError

                raise TabdpInternalError(
                    "a release recorded no per-currency charges, which a curve lifetime budget "
                    "needs; this is a bug in tabdp.")
            led.charge(losses.units, sums, maxes, within=within)
        if led.autocommit:
            led.commit(label=record.name, release=record.name,
                       public_curve=records_curve(led.pending_releases))

    def commit_ledger(self, *, spec_hash: str | None = None, manifest_hash: str | None = None,
                      label: str | None = None, release: str | None = None,
                      public_curve: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Commit the session's uncommitted losses to its lifetime ledger (one release entry).

        The release workflow calls it once its outputs are written; a ledger opened with
        ``autocommit=True`` (the default) commits after each release by itself. The commit
        adds every charge made on the ledger since its last commit, by this session or another
        one sharing it, and records the public curves of all those releases
        (`tabdp.Ledger.pending_releases`).

        Args:
            spec_hash: The release spec's hash.
            manifest_hash: SHA-256 of the release's public manifest.
            label: A label for the release (e.g. the year).
            release: The release's public name (``None``: the label).
            public_curve: The release's public worst-case curves (the release workflow passes
                its plan's); ``None``: those of the releases recorded on the ledger since
                its last commit, by any session
                ([`records_curve`][tabdp.privacy.session.records_curve]).

        Returns:
            The chain entry written.

        Raises:
            InvalidParameterError: The session has no ledger.
            LedgerError: No release was recorded on the ledger since its last commit and no
                ``public_curve`` was given: nothing is written (an empty release would record
                an all-zero curve, and the series' statement would fall back to the lifetime
                budget alone; review stop 63).

        Example:
            >>> import tempfile, pathlib, polars as pl, tabdp
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> led = tabdp.Ledger.create(p, series="s", lifetime_budget=1.0, autocommit=False)
            >>> s = Session(unit="id", seed=1, ledger=led)
            >>> _ = pl.DataFrame({"id": [1], "c": ["a"]}).dp.count(
            ...     by=["c"], keys=tabdp.KeySet.from_dict(c=["a"]), session=s,
            ...     mechanism=tabdp.mechanisms.Gaussian(1.0))
            >>> s.commit_ledger(label="2026")["seq"]
            1
        """
        if self.lifetime is None:
            raise InvalidParameterError(
                "Session.commit_ledger: this session has no lifetime ledger.\nHint: "
                "Session(unit=..., ledger=tabdp.Ledger.open(path, ...)).")
        if public_curve is None and not self.lifetime.pending_releases:
            from tabdp.exceptions import LedgerError

            # the entry's curve would be all zeros (no release to bound), and the series'
            # statement would then fall back to the lifetime budget alone (review stop 63)
            raise LedgerError(
                f"Session.commit_ledger: no release was recorded on the lifetime ledger of "
                f"series {self.lifetime.series!r} since its last commit (got 0 releases); a "
                "commit records the releases made since the last one, so there is nothing "
                "to commit. Nothing was written.\nHint: commit once after the releases of a "
                "run (a ledger opened with autocommit=True commits each release itself); "
                "charges made with Ledger.charge directly are committed with "
                "Ledger.commit(public_curve=...).")
        if public_curve is None:  # every session's releases whose charges it commits
            public_curve = records_curve(self.lifetime.pending_releases)
        entry = dict(self.lifetime.commit(spec_hash=spec_hash, manifest_hash=manifest_hash,
                                          label=label, release=release,
                                          public_curve=public_curve))
        return entry

    # -- reporting ----------------------------------------------------------------------------
    def report(self, delta: float | None = None) -> Report:
        """The session's report: public part (``to_dict``) and confidential ``per_record``.

        Args:
            delta: Optional δ in (0, 1) at which the report also states each record's
                (ε, δ)-DP loss (column ``epsilon_delta`` of
                [`Report.per_record`][tabdp.Report.per_record], and the ``epsilon_delta`` entries of
                the public policy curve).

        Returns:
            A [`Report`][tabdp.Report].

        Example:
            >>> Session().report().to_dict()["queries"]
            []
        """
        return Report(self, delta)

    def __repr__(self) -> str:
        """Public settings and the number of releases; never a per-unit loss."""
        seed = "secure" if self.seed is None else f"seed={self.seed} (NOT FOR PRODUCTION)"
        return (f"Session(unit={self.unit!r}, {seed}, budget={self.budget!r}, "
                f"mode={self.mode!r}, releases={len(self.records)})")


def _check_lifetime(ledger: Any, unit: str | None, row_ids: bool,
                    read_only_ok: bool = False) -> Any:
    """The session's lifetime ledger, checked before any data is read (``None`` for none).

    A ledger opened ``read_only=True`` is refused unless ``read_only_ok`` (``tabdp compare``'s
    DP side): it filters but commits nothing, so a session's releases on it would be charged
    nowhere and the series' lifetime guarantee would not hold for them (review stop 63).
    """
    if ledger is None:
        return None
    if not all(hasattr(ledger, a) for a in ("lookup_lifetime", "charge", "commit", "budget")):
        raise InvalidParameterError(
            f"Session: ledger must be a tabdp.Ledger; got {type(ledger).__name__}.\nHint: "
            "Session(unit='estab_id', ledger=tabdp.Ledger.open(path, series=..., "
            "lifetime_budget=..., create=True)).")
    if unit is None or (row_ids and unit == ROW_ID_COLUMN):
        raise InvalidParameterError(
            "Session: a lifetime ledger needs a unit id column (unit='<id column>'); without "
            "one each row is a unit identified by its position in this run's input, which "
            "does not identify the same record in another run.\nHint: give the stable id of "
            "the privacy unit (e.g. unit='estab_id'; in a spec, input.unit), the same in every "
            "run of the series.")
    if getattr(ledger, "read_only", False) and not read_only_ok:
        raise InvalidParameterError(
            f"Session: the lifetime ledger of series {ledger.series!r} was opened with "
            "read_only=True; got that read-only ledger. A session's ledger must be writable: "
            "a read-only ledger filters units but commits nothing, so this session's releases "
            "would be charged nowhere and the series' lifetime guarantee would not hold for "
            "them (read-only opens are for tabdp compare, which never publishes). Nothing was "
            "read.\nHint: open it without read_only (tabdp.Ledger.open(path, series=..., "
            "lifetime_budget=..., autocommit=...)) and commit the session's releases.")
    return ledger


def _is_frame(native: Any) -> bool:
    """Whether ``native`` is a frame an author-mode session can pin (`tabdp.frame.backends`)."""
    from tabdp.frame.backends import is_frame

    return is_frame(native)


def _pin_frame(native: Any) -> Any:
    """The pinned data of a frame (`tabdp.frame.backends.pin_frame`), in the curator's call.

    A frame that cannot be pinned (a pandas column of mixed types, a file that does not parse)
    fails as a `DataValidationError`, its cause chained, as `tabdp.Curator` fails: the cause
    may quote the data (CONFIDENTIAL: the curator's, never an author's).
    """
    from tabdp.exceptions import DataValidationError, TabdpError
    from tabdp.frame.backends import pin_frame

    try:
        return pin_frame(native)
    except (KeyboardInterrupt, SystemExit, TabdpError):
        raise
    except BaseException as err:  # noqa: BLE001 - Rust panics are BaseExceptions
        raise DataValidationError(
            f"Session: the frame given as data= could not be pinned ({type(err).__name__}); no "
            "session was created. The cause is chained below (CONFIDENTIAL: it may quote the "
            "data; never pass it on to an author).\nHint: fix the column types (a pandas "
            "column of mixed types: convert it), or use tabdp.Curator with a declared schema.",
            confidential={"error": f"{type(err).__name__}: {err}"}) from err


#: Row ids assigned by a caller that read the input itself (the release workflow): a session
#: with this unit keeps a dense ledger by row id.
ROW_ID_COLUMN = ROW_ID

#: Session modes (see :class:`Session`).
MODES = ("curator", "author")


def _components(losses: UnitLosses) -> dict[str, np.ndarray]:
    """The loss components (``COMPONENTS``) one query adds to its units."""
    return loss_components(losses)


def _times(k: Any, v: Any) -> np.ndarray:
    """``k·v`` rounded up (`tabdp._numeric.mul_up`) for a count ``k`` >= 0 and losses ``v``."""
    v = np.asarray(v, dtype=np.float64)
    if k == 1:
        return v
    if k == 0:
        return np.zeros_like(v)
    return mul_up(v, float(k))


def total_policy_curve(entries: Sequence[tuple[Any, ...]], sizes: Sequence[float],
                       delta: float | None = None) -> list[dict[str, float | None]]:
    """Public worst-case curve of several releases.

    The loss of a unit contributing Δ to one cell of every released measure (``k`` charges per
    release: its number of measures, or 1 for a joint mechanism; times the cells a unit may
    touch when that is bounded).

    Args:
        entries: ``(mechanism, k)`` or ``(mechanism, k, cap)`` per release: ``cap`` bounds the
            sensitivity charged (e.g. ``max_rows`` of a count), ``None`` for none.
        sizes: Record sizes Δ (≥ 0).
        delta: Optional δ: rows then also hold ``epsilon_delta`` (ε at that δ; exact Gaussian-DP
            for Gaussian-shift mechanisms, zCDP conversion for the others, basic composition for
            approximate-DP-only ones).

    Returns:
        Rows ``{"delta", "rho", "epsilon"[, "epsilon_delta"]}`` (``None`` for infinite values).

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> total_policy_curve([(Gaussian(1.0), 2)], [0.0, 1.0])[1]
        {'delta': 1.0, 'rho': 1.0, 'epsilon': None}
    """
    d = np.asarray(sizes, dtype=np.float64)
    comps = {c: np.zeros_like(d) for c in COMPONENTS}
    for entry in entries:
        mechanism, k = entry[0], entry[1]
        cap = entry[2] if len(entry) > 2 else None
        dd = d if cap is None else np.minimum(d, cap)
        # k times each loss and the sum over releases, rounded up (`add_up`, `mul_up`): the
        # curve is never below the exact total of the releases' losses (review R18-1)
        rho = _times(k, mechanism.rho(dd))
        add = {"rho": rho, "epsilon": _times(k, mechanism.epsilon(dd))}
        guarantee = UnitLosses.guarantee_of(mechanism)
        if guarantee == "approx":
            ea, da = mechanism.approx_policy(dd)
            add["eps_a"], add["delta_a"] = _times(k, ea), _times(k, da)
        else:
            add["rho_z"] = rho
            if guarantee == "gaussian":
                add["rho_g"] = rho
        for c, v in add.items():
            comps[c] = add_up(comps[c], v)
    rows: list[dict[str, float | None]] = [
        {"delta": float(x), "rho": _num(a), "epsilon": _num(b)}
        for x, a, b in zip(d, comps["rho"], comps["epsilon"], strict=True)]
    if delta is not None:
        eps = epsilon_at(delta, comps["rho_z"], comps["rho_g"], comps["eps_a"],
                         comps["delta_a"], comps["epsilon"])
        for row, v in zip(rows, eps, strict=True):
            row["epsilon_delta"] = _num(v)
    return rows


def records_curve(records: Sequence[QueryRecord]) -> dict[str, Any]:
    """PUBLIC: the worst-case curves of a session's releases, as a ledger entry records them.

    The total policy curve of ``records`` (sizes 0, 1, 10, ..., 1e8), the same per currency
    (a sum's measures, each its own; a joint release's measures joined by ``+``; ``rows`` for
    counts, medians and quantiles) and which units it bounds: from the mechanisms and the
    public contribution bounds only.

    Args:
        records: The releases (e.g. a session's ``records`` since its last commit).

    Returns:
        [`release_curve`][tabdp.privacy.lifetime.release_curve]'s form.

    Example:
        >>> from tabdp.mechanisms import Gaussian
        >>> r = QueryRecord(1, "q1", "count", ("count",), ("c",), Gaussian(1.0), {}, 0.9,
        ...                 "error", None, bounds={"max_cells": 1, "max_rows": 1})
        >>> c = records_curve([r])
        >>> c["total"][2], sorted(c["currencies"]), c["holds_for"]
        ({'delta': 10.0, 'rho': 0.5}, ['rows'], 'every unit')
    """
    from tabdp.privacy.budget import ROWS_CURRENCY, joint_currency
    from tabdp.privacy.lifetime import release_curve

    per: dict[str, list[tuple[Any, int, float | None]]] = {}
    for r in records:
        mech, k, cap = r.curve_entry()
        if r.kind != "sum":
            per.setdefault(ROWS_CURRENCY, []).append((mech, k, cap))
        elif getattr(mech, "joint", False):
            per.setdefault(joint_currency(r.measures), []).append((mech, k, cap))
        else:
            cells = k // max(1, len(r.measures))
            for m in r.measures:
                per.setdefault(m, []).append((mech, cells, cap))
    total = total_policy_curve([r.curve_entry() for r in records], POLICY_GRID)
    holds = "every unit" if all(r.bounded for r in records) else (
        "units contributing to one cell per measure of each release")
    return release_curve(total, {c: {"rows": None, "curve": total_policy_curve(e, POLICY_GRID)}
                                 for c, e in per.items()}, holds)


class Report:
    """Report of a session: a public summary and a CONFIDENTIAL per-record table.

    * [`to_dict`][tabdp.Report.to_dict] holds only data-independent content: mechanisms, parameters,
      policy curves, key-set sizes, the seed policy and budget. It may be published.
    * [`per_record`][tabdp.Report.per_record] holds each unit's actual losses, which reveal its
      values: it must stay inside the agency.
    * [`confidential_summary`][tabdp.Report.confidential_summary] holds record-derived counts (rows
      dropped outside the key set, largest loss, quantiles): confidential too.

    Args:
        session: The session to report on.
        delta: Optional δ in (0, 1): the report then also states each record's (ε, δ)-DP
            loss (``epsilon_delta``), composing approximate-DP releases (their ε and per-cell δ
            add up) with the exact Gaussian-DP or zCDP conversion of the other releases' ρ.

    Example:
        >>> Report(Session(seed=3)).to_dict()["session"]["randomness"]
        'seeded: NOT FOR PRODUCTION (the seed is in the confidential summary)'
    """

    def __init__(self, session: Session, delta: float | None = None) -> None:
        """Report on ``session``, with ε at ``delta`` where given."""
        self.session = session
        self.delta = None if delta is None else check_dp_delta(delta, "Report")
        if self.delta is not None and (why := statement_delta_problem(self.delta)) is not None:
            warnings.warn(f"Report: {why}. A release spec refuses it (release.delta); use e.g. "
                          "delta=1e-9.", PrivacyWarning, stacklevel=2)

    @floats_quiet
    def write_per_record(self, path: Any, rename: dict[str, str] | None = None) -> None:
        """Write the CONFIDENTIAL [`per_record`][tabdp.Report.per_record] table to a Parquet file.

        A streaming session (``Session(streaming=True)``) writes it with the engine, batch by
        batch, without holding it in memory; a Spark session with Spark's writer (one file,
        rows sorted by unit id; nothing per row passes through the driver); other sessions
        write the table they hold.

        Args:
            path: The Parquet file to write.
            rename: Columns to rename on the way (e.g. ``{"row": "row_id"}``).

        Example:
            >>> import tempfile, pathlib, polars as pl
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "per_record.parquet"
            >>> Session().report().write_per_record(p)
            >>> pl.read_parquet(p).columns
            ['row', 'rho', 'epsilon', 'size']
        """
        s = self.session
        if getattr(s._ledger, "reports_itself", False):  # the engine holding the losses writes
            s._ledger.write_per_record(s, self.delta, path, rename)
            return
        table = self.per_record
        frame = table if isinstance(table, pl.DataFrame) else pl.from_pandas(table)
        frame.rename(rename or {}).write_parquet(path, **PER_RECORD_PARQUET)

    @property
    @floats_quiet
    def per_record(self) -> Any:
        """CONFIDENTIAL: one row per unit with its total and per-query losses.

        Columns: the totals ``rho``, ``epsilon`` and ``size``, and ``rho_<name>`` per query.

        The frame is of the library the session's releases used (pandas or Polars). Units are
        identified by the unit column (or ``row``, the row position, when each row is a unit).
        Each row is a unit: every row read is listed (zero losses included). With a unit
        column: the units some release charged; a unit whose rows were all outside the key
        set, dropped by a rule or left out by the budget in every release is not listed (its
        loss is 0).
        ``epsilon`` is ``inf`` if any release touching the unit was not pure. ``size`` is the
        unit's largest absolute contribution to a released cell. When the report has a δ,
        ``epsilon_delta`` is the unit's (ε, δ)-DP loss at that δ (see [`Report`][tabdp.Report]).

        Example:
            >>> Session().report().per_record.columns
            ['row', 'rho', 'epsilon', 'size']
            >>> Session().report(delta=1e-9).per_record.columns
            ['row', 'rho', 'epsilon', 'size', 'epsilon_delta']
        """
        s = self.session
        if getattr(s._ledger, "reports_itself", False):
            # built by the engine that holds the losses: recomputed from the data (streaming),
            # or a Spark DataFrame built by Spark
            out = s._ledger.per_record(s, self.delta)
            return out.to_pandas() if s.backend == "pandas" and isinstance(
                out, pl.DataFrame) else out
        unit_col = s.unit or "row"
        recs = [r for r in s.records if r.losses is not None]
        shown = ("rho", "epsilon", "size")
        if isinstance(s._ledger, DenseLedger):
            ledger = s._ledger.frame(s._ledger.covered)
        else:
            ledger = s._ledger.frame()
        for c in ("rho", "epsilon", "size", *COMPONENTS):
            if c not in ledger.columns:
                ledger = ledger.with_columns(pl.lit(0.0, pl.Float64).alias(c))
        if ledger.height == 0 and ledger.schema["unit"] == pl.Null:
            # no unit charged yet: the unit column takes the releases' unit dtype, else the
            # input's unit column's (a release refused after reading the schema), else Int64
            # (as the Spark engine: `tabdp.frame._spark.SparkUnitLedger`), so the per-query
            # columns below join on a common dtype
            from tabdp.frame import binding

            dtypes = [r.losses.units.dtype for r in recs
                      if r.losses is not None and isinstance(r.losses.units, pl.Series)
                      and r.losses.units.dtype != pl.Null]
            known = binding.of(s).unit_dtype if s.unit is not None else None
            dtypes += [known] if known is not None and known != pl.Object else []
            ledger = ledger.with_columns(pl.col("unit").cast(dtypes[0] if dtypes else pl.Int64))
        out = ledger.select(pl.col("unit").alias(unit_col), *shown)
        if self.delta is not None:
            comps = {c: ledger[c].to_numpy() for c in COMPONENTS}
            out = out.with_columns(epsilon_delta=pl.Series(
                self._eps_delta(comps) if ledger.height else np.zeros(0), dtype=pl.Float64))
        for r in recs:
            assert r.losses is not None
            if isinstance(s._ledger, DenseLedger):  # row ids: dense columns
                ids = np.asarray(r.losses.units, dtype=np.int64)
                if ids.size == out.height and (not ids.size or (
                        ids[0] == 0 and ids[-1] == ids.size - 1 and increasing(ids))):
                    col = dense(r.losses.rho)  # every row, in order
                else:
                    col = np.zeros(out.height)
                    col[ids[ids < out.height]] = r.losses.rho[ids < out.height]
                out = out.with_columns(pl.Series(f"rho_{r.name}", col, dtype=pl.Float64))
                continue
            have, units = common_ids(out[unit_col], r.losses.units)
            out = out.with_columns(have)
            part = pl.DataFrame({unit_col: units, f"rho_{r.name}": dense(r.losses.rho)})
            if part.height == out.height and part[unit_col].equals(out[unit_col],
                                                                   null_equal=True):
                # the release charged every unit of the ledger, in its order (sorted by unit)
                out = out.with_columns(part[f"rho_{r.name}"])
                continue
            pos = sorted_positions(out[unit_col], units)
            if pos is not None:
                # part of the ledger's units (e.g. a filter left some out), both sorted by
                # unit: the losses placed by binary search, 0.0 elsewhere (the join's result)
                col = np.zeros(out.height)
                col[pos] = part[f"rho_{r.name}"].to_numpy()
                out = out.with_columns(pl.Series(f"rho_{r.name}", col, dtype=pl.Float64))
                continue
            out = out.join(part, on=unit_col, how="left", maintain_order="left",
                           nulls_equal=True).with_columns(pl.col(f"rho_{r.name}").fill_null(0.0))
        if s.lifetime is not None:  # this run included (committed or not)
            out = out.with_columns(rho_lifetime=pl.Series(
                s.lifetime.lookup(out[unit_col], ["rho"])["rho"], dtype=pl.Float64))
        if s.backend == "pandas":
            return out.to_pandas()
        return out

    def _eps_delta(self, comps: dict[str, np.ndarray]) -> np.ndarray:
        assert self.delta is not None
        return epsilon_at(self.delta, comps["rho_z"], comps["rho_g"], comps["eps_a"],
                          comps["delta_a"], comps["epsilon"])

    def total_policy_curve(self) -> list[dict[str, float | None]]:
        """Public worst-case curve: ρ and ε of a unit contributing Δ to every released cell kind.

        Each measure of each query counts once; a joint mechanism counts once per cell, Δ being
        then the norm of its weighted contribution vector. Δ = 0, 1, 10, ..., 1e8.

        Returns:
            Rows ``{"delta", "rho", "epsilon"}`` (``None`` for infinite values), plus
            ``"epsilon_delta"`` (ε at the report's δ) when the report has a δ.

        Example:
            >>> Report(Session()).total_policy_curve()[1]
            {'delta': 1.0, 'rho': 0.0, 'epsilon': 0.0}
        """
        entries = [r.curve_entry() for r in self.session.records]
        return total_policy_curve(entries, POLICY_GRID, self.delta)

    def curve_holds_for(self) -> str:
        """Which units the public total curve bounds (public: it depends on the arguments).

        Returns:
            ``"every unit"`` when every release bounds the cells a unit touches (and the rows a
            unit counts in a cell), else a sentence saying which units it describes.

        Example:
            >>> Report(Session()).curve_holds_for()
            'every unit'
        """
        s = self.session
        if all(r.bounded for r in s.records):
            return "every unit"
        text = ("units contributing to one cell per measure of each release (and Δ rows to a "
                "count cell); a unit in more cells pays the sum over its cells")
        if s.budget is not None:
            text += "; the budget bounds every unit's total"
        return text

    def to_dict(self) -> dict[str, Any]:
        """PUBLIC summary: data-independent content only.

        Returns:
            A JSON-serializable dict: tabdp version, session settings, one entry per release
            (mechanism, parameters, policy curve, key set size and source) and the total curve.

        Example:
            >>> sorted(Report(Session()).to_dict())  # doctest: +NORMALIZE_WHITESPACE
            ['queries', 'session', 'tabdp_version', 'total_policy_curve',
             'total_policy_curve_holds_for']
        """
        from tabdp._version import __version__

        s = self.session
        return {
            "tabdp_version": __version__,
            "session": {
                "unit": s.unit or "row",
                "mode": s.mode,
                # never the seed itself: with it anyone could regenerate the noise and
                # subtract it from the published tables
                "randomness": "secure (OS CSPRNG)" if s.seed is None else
                              "seeded: NOT FOR PRODUCTION (the seed is in the confidential "
                              "summary)",
                "budget": None if s.budget is None else s.budget.to_dict(),
                "delta": self.delta,
                **({} if s.lifetime is None else
                   {"lifetime": s.lifetime.public(s._lifetime_before, current={
                       "release": None, "curve": records_curve(s.records)})}),
            },
            "queries": [r.public() for r in s.records],
            "total_policy_curve": self.total_policy_curve(),
            "total_policy_curve_holds_for": self.curve_holds_for(),
        }

    @floats_quiet
    def confidential_summary(self) -> dict[str, Any]:
        """CONFIDENTIAL counts and loss statistics computed from the records.

        Returns:
            The seed of a seeded session (it reproduces the noise), per-query counts (rows
            read, rows outside the key set, null handling) and overall loss statistics (units,
            max and quantiles of ρ).

        Example:
            >>> Report(Session()).confidential_summary()["units"]
            0
        """
        s = self.session
        qs = [0.5, 0.9, 0.99, 0.999]
        failures = ({"author_failures": [dict(f) for f in s._failures]} if s._failures
                    else {})
        if getattr(s._ledger, "reports_itself", False):
            spark_stats = s._ledger.rho_summary(s, qs)  # computed in Spark or from the data
            return {"seed": s.seed, **spark_stats,
                    "queries": [{"name": r.name, **r.confidential,
                                 "exact_rounding_fallbacks": dict(r.fallbacks)}
                                for r in s.records], **failures}
        if isinstance(s._ledger, DenseLedger):
            frame = s._ledger.frame(s._ledger.covered)
        else:
            frame = s._ledger.frame()
        rho = frame["rho"].to_numpy() if "rho" in frame.columns else np.zeros(frame.height)
        stats = {}
        if rho.size:
            # Losses may be inf (approximate-DP releases); interpolating between two infs gives
            # NaN (and a RuntimeWarning) where the quantile is inf.
            with np.errstate(invalid="ignore"):
                vals = np.quantile(rho, qs)
            vals = np.where(np.isnan(vals) & np.any(np.isinf(rho)), np.inf, vals)
            stats = {f"rho_q{q}": float(v) for q, v in zip(qs, vals, strict=True)}
        return {
            "seed": s.seed,
            "units": int(rho.size),
            "rho_max": float(rho.max()) if rho.size else None,
            **stats,
            "queries": [{"name": r.name, **r.confidential,
                         "exact_rounding_fallbacks": dict(r.fallbacks)} for r in s.records],
            **failures,
        }
