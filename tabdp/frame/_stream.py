"""Row mode without per-row state: releases recomputed from the data (``Session(streaming=True)``).

In row mode every record is one row, and the loss a release charges a record is a function of
that row's own values and the release's public definition (key set, data rules, mechanism):
which cell the row falls in, its contribution there, and the policy at that contribution.
Whether the budget admits the record depends only on its own earlier losses. So a session can
keep, instead of per-row arrays, the *definition* of each release (a `Program`) and
recompute every record's running totals from the data when they are needed:

* a release evaluates **one lazy plan** over its input: the cells of every earlier release and
  of this one (joins with the public key sets), each row's contributions, a batch function
  that replays the earlier releases' charges and the budget filter for the rows of one batch
  (the same numpy policy and filter code as the in-memory ledger, so every loss is the same
  double), and the aggregates: exact cell totals of the admitted contributions, the
  confidential counters and the row fingerprints. Polars' streaming engine runs it batch by
  batch: memory follows the key set and the batch size, not the number of rows;
* the per-record report is the same plan with the running totals as output, which the caller
  collects or sinks to Parquet (``sink_parquet``) without holding it in memory. A release's
  pass that runs the batch function writes those running totals as it goes (`_Spill`), and
  `sink_report` writes the report from them when no release was added since: one replay
  gives both the admission flags and the losses.

The session's fingerprints (an order-sensitive hash of every column a release read) guarantee
that every release, and the report, read the same rows in the same order: a release over other
rows is refused before anything is drawn, so a recomputed loss is always the loss of the record
it was charged to.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import numpy as np
import polars as pl

from tabdp._numeric import add_up_into, engine_thread
from tabdp._policy import Policy as _Policy
from tabdp._reserved import RESERVED
from tabdp.exceptions import InvalidParameterError
from tabdp.frame import binding
from tabdp.frame._engine import (
    _CELL,
    _ROWS,
    FP,
    MAX_ABS,
    ROW_ID,
    SUM_SCALE_BITS,
    _cells,
    _charges,
    _counter_exprs,
    _fingerprint,
    _fp_columns,
    _keep_mask,
    _measure_parts,
    _Opened,
    _output_dtypes,
    _Prepared,
    _row_inside_expr,
    _rule_counts,
    _Rules,
    _strict_checks,
    left_out_counts,
)
from tabdp.frame.backends.base import Aggregated
from tabdp.frame.binding import cached_snapshot, keep_snapshot
from tabdp.frame.keys import KeySet
from tabdp.privacy.accounting import COMPONENTS, epsilon_at
from tabdp.privacy.ledger import (
    PER_RECORD_PARQUET,
    PER_RECORD_ROW_GROUP,
    ReplayLedger,
    loss_components,
)
from tabdp.privacy.session import Session

__all__ = ["Program", "Planned", "check_batch", "stream_aggregate", "keep_aggregation",
           "count_from_kept", "pass_fingerprints", "release_queries", "cell_sets",
           "InBatch", "streaming_quantile_data",
           "replay_report",
           "collect_report", "sink_report", "summarize_report"]

#: The prefix of this engine's internal columns (per program ``j``: its cell ``c<j>``, rows kept
#: ``r<j>``, contributions ``v<j>:<m>``, admission flags ``ok<j>:<currency>``, the aggregates'
#: ``n``, ``tot:<m>``...): under ``RESERVED``, which no measure, key or unit column takes, so
#: none is read in place of a user's column nor clashes with one.
_P = f"{RESERVED}_"


class Program(NamedTuple):
    """The public definition of one row-mode release, enough to recompute its charges.

    Attributes:
        name: The release's label (the per-record report's ``rho_<name>`` column).
        kind: ``"sum"`` or ``"count"`` (counts, medians and quantiles: Δ is the row, 1).
        by: Group-by columns.
        keys: The public key set.
        measures: Summed columns (a count's, median's or quantile's columns only decide which
            rows its rules keep).
        rules: Data rules (nulls, negatives, mode).
        policy: The mechanism's per-record policy.
        bits: Fixed-point scale per measure.
    """

    name: str
    kind: str
    by: tuple[str, ...]
    keys: KeySet
    measures: tuple[str, ...]
    rules: _Rules
    policy: _Policy
    bits: dict[str, int]


#: Measure dtypes whose fixed-point magnitude a report reads as a float (`_magnitude`).
_FLOAT_MAGNITUDES = (pl.Float64, pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16,
                     pl.UInt32, pl.UInt64)


def _magnitude(m: str, dt: Any, rules: _Rules) -> pl.Expr | None:
    """|fixed-point contribution| of ``m`` as a Float64, equal to the 128-bit one cast, or None.

    A Float64's fixed-point value is an integer-valued double (it is rounded as a double, then
    cast exactly to 128 bits) and an integer's converts to the nearest double whatever its
    sign: the charges (`tabdp.frame._engine._abs_float_up`) read the same double without
    the 128-bit column. ``None`` for other dtypes (their 128-bit value is kept).
    """
    if dt not in _FLOAT_MAGNITUDES:
        return None
    x = pl.col(m)
    if dt == pl.Float64:
        v = (x.clip(-MAX_ABS, MAX_ABS) * float(2**SUM_SCALE_BITS)).round()
    else:
        v = x.cast(pl.Float64)
    if rules.negatives == "zero":
        v = v.clip(lower_bound=0.0)
    return v.abs()


def _program_columns(lf: pl.LazyFrame, schema: pl.Schema, prog: Program, j: int,
                     ordered: bool, seen: dict[tuple[Any, ...], str] | None = None,
                     magnitudes: bool = False, whole: bool = False
                     ) -> tuple[pl.LazyFrame, list[str]]:
    """Add program ``j``'s cell, rows kept and fixed-point contributions (names returned).

    ``seen`` maps (grouping, key set) to the cell column of an earlier program of the plan
    with the same ones: its cells are copied rather than found again (updated here). With
    ``magnitudes`` (the report, which sums nothing) a contribution is its magnitude as a
    Float64 where `_magnitude` gives it and the policy reads no sign (not joint), and the
    cell column, where `_row_inside_expr` applies, is 0 in a cell and null outside (the
    report reads only that; the same rows are null). With ``whole`` as well (the release's own
    pass found every row in a cell: `ReplayLedger.whole`) the cell column is 0 for every row,
    without a lookup of the keys.
    """
    parts = {m: _measure_parts(m, schema[m], prog.rules) for m in prog.measures}
    keep = _keep_mask(parts, prog.rules, pl.lit(True), None)
    summed = prog.measures if prog.kind == "sum" else ()  # a count's columns only filter rows

    def value(m: str) -> pl.Expr:
        mag = (_magnitude(m, schema[m], prog.rules)
               if magnitudes and not prog.policy.joint else None)
        if mag is not None:
            return pl.when(keep & ~parts[m]["bad"]).then(mag).otherwise(pl.lit(0.0))
        return (pl.when(keep & ~parts[m]["bad"]).then(parts[m]["fixed"])
                .otherwise(pl.lit(0, pl.Int128)))

    lf = lf.with_columns(
        *[value(m).alias(f"{_P}v{j}:{m}") for m in summed],
        keep.cast(pl.Int64).alias(f"{_P}r{j}"))
    same = (prog.by, id(prog.keys))
    # the report reads only whether a row is in a cell (``_P c<j>`` not null), not which one
    inside = (_row_inside_expr(schema, prog.keys, list(prog.by))
              if magnitudes and not whole else None)
    if magnitudes and whole:
        lf = lf.with_columns(pl.lit(0, pl.Int64).alias(f"{_P}c{j}"))
    elif seen is not None and same in seen:
        lf = lf.with_columns(pl.col(seen[same]).alias(f"{_P}c{j}"))
    elif inside is not None:
        lf = lf.with_columns(pl.when(inside).then(pl.lit(0, pl.Int64)).alias(f"{_P}c{j}"))
        if seen is not None:
            seen[same] = f"{_P}c{j}"
    else:
        lf = _cells(lf, schema, prog.keys, list(prog.by), f"{_P}c{j}", ordered)
        if seen is not None:
            seen[same] = f"{_P}c{j}"
    return lf, [f"{_P}c{j}", f"{_P}r{j}", *[f"{_P}v{j}:{m}" for m in summed]]


#: The running totals a report writes (ε at δ reads the other components, not written).
_REPORTED = ("rho", "epsilon", "size")


#: The name of a spill folder: this prefix, the writing process's id, a dash, random letters.
_SPILL_PREFIX = "tabdp-report-"
_swept = False


def _sweep_stale_spills(folder: str | None = None) -> int:
    """Remove the spill folders that killed processes left (once per process).

    A `_Spill` folder is removed at a normal exit, not after ``SIGKILL``; its files are
    confidential (every record's running losses). The first spill of a process removes, in the
    temporary directory, every folder named ``tabdp-report-<pid>-*`` that this user owns, that
    is a folder and not a link, and whose process no longer exists. A folder of a live process
    (or of another user, or whose process cannot be checked) is left alone. Best effort: a
    folder that cannot be removed stays.

    Args:
        folder: Where to look (default: `tempfile.gettempdir()`); a given folder is swept
            every time.

    Returns:
        How many folders were removed.

    Example:
        >>> import tempfile
        >>> _sweep_stale_spills(tempfile.mkdtemp())
        0
    """
    import shutil
    import stat
    import tempfile

    global _swept
    if folder is None:
        if _swept:
            return 0
        _swept = True
    root = folder or tempfile.gettempdir()
    removed = 0
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    for entry in entries:
        name = entry.name
        if not name.startswith(_SPILL_PREFIX):
            continue
        pid_text = name[len(_SPILL_PREFIX):].split("-", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            os.kill(int(pid_text), 0)  # the process exists (or is not ours to signal)
            continue
        except ProcessLookupError:
            pass
        except (OSError, OverflowError, ValueError):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed += not os.path.exists(entry.path)
    return removed


class _Offload:
    """A thread for the side work of a releases' pass's batch function (`_Spill`, `InBatch`).

    The batch function runs on one thread at a time (it holds the GIL for its Python steps),
    and a pass waits for it: its work is the pass's critical path, while the machine's other
    cores decode the input. Its side work, which nothing later in the batch reads (the
    later sets' group-by, ε at δ and the spill's file), is handed to this thread (`submit`),
    which runs it while the batch function goes on to the next batch (Polars' group-by,
    NumPy's arithmetic and the file write release the GIL). At most `LIMIT` tasks wait: a
    task submitted when they are that many runs at once on the caller's thread, which then
    never waits (the thread calls Polars, which could need a thread the batch function
    holds) and memory stays bounded. The tasks' results do not depend on their order (files
    named by their rows, group-bys added up). `drain` waits for every task and raises the
    first task's error; `close` stops the thread.

    Example:
        >>> off, out = _Offload(), []
        >>> off.submit(lambda: out.append(1))
        >>> off.drain(); off.close(); out
        [1]
    """

    LIMIT = 3

    def __init__(self) -> None:
        """No thread yet (started by the first task)."""
        import queue
        import threading

        self._q: queue.SimpleQueue[Callable[[], Any] | None] = queue.SimpleQueue()
        self._cond = threading.Condition()
        self._waiting = 0
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, task: Callable[[], Any]) -> None:
        """Run ``task`` on the thread, or here if `LIMIT` tasks wait (or it was closed)."""
        import threading

        with self._cond:
            queued = not self._closed and self._waiting < self.LIMIT
            if queued:
                self._waiting += 1
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, daemon=True,
                                                    name="tabdp-pass-side-work")
                    self._thread.start()
                self._q.put(task)
        if not queued:
            task()

    def _run(self) -> None:
        with engine_thread():  # beside the engine's threads
            self._serve()

    def _serve(self) -> None:
        while (task := self._q.get()) is not None:
            try:
                if self._error is None:
                    task()
            except BaseException as err:  # noqa: BLE001 - raised by `drain`, in the pass
                self._error = err
            finally:
                with self._cond:
                    self._waiting -= 1
                    self._cond.notify_all()

    def drain(self) -> None:
        """Wait for every task submitted; raise the first one's error."""
        with self._cond:
            self._cond.wait_for(lambda: self._waiting == 0)
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Stop the thread once the tasks submitted have run (later tasks run on the caller)."""
        with self._cond:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._q.put(None)
            thread.join()


class _Spill:
    """CONFIDENTIAL: the per-record report's rows, written by a releases' pass batch by batch.

    A releases' pass (`StreamingBackend`) replays every program's charges and the budget
    filter for the admission flags; the same replay gives every record's running totals. They
    are written here (one Arrow IPC file per batch, in a private temporary folder removed with
    the object or once the report is written), so that the report (`sink_report`) reads them
    instead of replaying every program over the input again. Each batch's rows are stored in
    row-id order; the files are read in row-id order, and only if they hold every row of the
    input exactly once in contiguous batches (else the report is replayed as before). A
    column that is one value over a batch, or a copy of another, is not written (`_compact`)
    and is restored as it was when read (`scan`): about half the bytes on disk.

    When the caller declared the report it will write next (`ReplayLedger.expect_report`:
    its δ), the files hold that report's columns: ε at δ computed here, batch by batch
    (`epsilon_at`, value by value: the same doubles), and not the four components it is
    computed from (``rho_z``, ``rho_g``, ``eps_a``, ``delta_a``). The report then reads
    and encodes the files as they are; a report at another δ is replayed from the input.

    Attributes:
        names: The programs replayed, in release order (set by `_replayed`).
        source: The input the pass read (set by the backend).
        rows: The rows the pass read (set by the backend once it ended).
        declared: The declared report's δ as a 1-tuple (``(None,)``: no ``epsilon_delta``);
            None: no report declared.
    """

    def __init__(self, declared: tuple[float | None] | None = None) -> None:
        """A new private folder (mode 0700); nothing written yet (``declared``: see above)."""
        import shutil
        import tempfile
        import weakref

        _sweep_stale_spills()
        self.folder = tempfile.mkdtemp(prefix=f"{_SPILL_PREFIX}{os.getpid()}-")
        self.names: list[str] = []
        self.source: Any = None
        self.rows = 0
        self.parts: list[tuple[int, int, str]] = []  # (first row id, rows, file)
        self.usable = True
        self._seq = itertools.count()
        #: Per file, the columns not written to it (`_compact`): constants and copies.
        self.layout: dict[str, _Layout] = {}
        self.declared = declared
        #: The pass's `_Offload`, where `add` does its work (None: on the caller's thread).
        self.offload: _Offload | None = None
        self._remove = weakref.finalize(self, shutil.rmtree, self.folder, ignore_errors=True)

    def add(self, ids: np.ndarray, cols: dict[str, np.ndarray]) -> None:
        """Write one batch's report rows (``ids``: their row ids; ``cols``: aligned columns).

        On the pass's `_Offload` thread when there is one (the arrays are not written after).
        """
        if self.offload is not None:
            self.offload.submit(lambda: self._add(ids, cols))
        else:
            self._add(ids, cols)

    def _add(self, ids: np.ndarray, cols: dict[str, np.ndarray]) -> None:
        n = ids.size
        if not n or not self.usable:
            return
        if ids.dtype.kind not in "iu":  # null ids (a caller's): no row can be found by id
            self.usable = False
            return
        ids = ids.astype(np.int64, copy=False)
        if n > 1 and not bool(np.all(ids[1:] > ids[:-1])):
            order = np.argsort(ids, kind="stable")
            ids = ids[order]
            cols = {k: v[order] for k, v in cols.items()}
        if int(ids[-1]) - int(ids[0]) + 1 != n:  # not one contiguous run of rows
            self.usable = False
            return
        if self.declared is not None:  # the declared report's columns (see the class)
            delta = self.declared[0]
            eps = ({"epsilon_delta": epsilon_at(delta, *(cols[c] for c in _DELTA_PARTS))}
                   if delta is not None else {})
            cols = {**{k: v for k, v in cols.items() if k not in _DELTA_ONLY}, **eps}
        # named by its first row id and a number of its own (review r33: two batches of
        # repeated ids starting alike must not overwrite one file)
        path = f"{self.folder}/{int(ids[0]):020d}-{next(self._seq)}.arrow"
        stored, layout = _compact(cols)
        try:
            pl.DataFrame({ROW_ID: ids, **stored}).write_ipc(path, compression="uncompressed")
        except OSError:
            # the files only spare the report a replay: a write refused (the temporary
            # folder full or gone) makes the report replay, never fails the release
            # (review R18-7)
            self.usable = False
            with contextlib.suppress(OSError):
                os.unlink(path)
            return
        self.layout[path] = layout
        self.parts.append((int(ids[0]), n, path))

    def files(self) -> list[str] | None:
        """The files in row order if they hold rows ``0 .. rows - 1`` exactly once, else None."""
        rows = self.rows
        if not self.usable or not rows:
            return None
        parts = sorted(self.parts)
        at = 0
        for first, n, _ in parts:
            if first != at:
                return None
            at += n
        return [f for _, _, f in parts] if at == rows else None

    def scan(self, files: list[str]) -> pl.LazyFrame:
        """Every column of ``files`` (`files`'s order), constants and copies restored.

        Files of one layout are scanned together; the scans are concatenated in order.
        """
        # layouts compare equal only when their constants have the same bits: a constant is
        # never NaN or -0.0 (`_compact`)
        groups: list[tuple[_Layout, list[str]]] = []
        for f in files:
            lay = self.layout[f]
            if groups and groups[-1][0] == lay:
                groups[-1][1].append(f)
            else:
                groups.append((lay, [f]))
        scans = [pl.scan_ipc(fs).select(_restored([ROW_ID, *lay[2]], lay[0], lay[1]))
                 for lay, fs in groups]
        return scans[0] if len(scans) == 1 else pl.concat(scans, how="vertical")

    def close(self) -> None:
        """Remove the folder and its files."""
        self._remove()


class _Layout(NamedTuple):
    """The columns of a spill file not written to it, and every column's name in order."""

    consts: dict[str, tuple[Any, pl.DataType]]  # column: (its one value, its dtype)
    copies: dict[str, str]                      # column: the written column it equals
    names: tuple[str, ...]                      # every column (row ids aside), in order


#: Batches shorter than this are written as they are (`_compact`).
_COMPACT_MIN = 64


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays hold the same bytes (so ``-0.0`` differs from ``0.0``)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype == np.float64:
        return bool(np.array_equal(a.view(np.int64), b.view(np.int64)))
    return bool(np.array_equal(a, b))


def _compact(cols: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], _Layout]:
    """The columns a spill file holds, and the layout that restores the others.

    A float64 or boolean column whose values are all the same bits (a loss component a
    release never charged, a count's ρ, a pure release's ε = ∞; never NaN or ``-0.0``) is kept
    as its one value; a
    column with the same bits as an earlier written one (ρ_z equal to ρ, two releases of one
    policy over the same measure) as that column's name. Both are restored exactly
    (`_restored`): the report reads the same doubles; the files hold about half the bytes.

    Example:
        >>> cols = {"a": np.arange(64.0), "b": np.zeros(64), "c": np.arange(64.0)}
        >>> stored, lay = _compact(cols)
        >>> list(stored), lay.consts["b"][0], lay.copies
        (['a'], 0.0, {'c': 'a'})
    """
    names = tuple(cols)
    consts: dict[str, tuple[Any, pl.DataType]] = {}
    copies: dict[str, str] = {}
    stored: dict[str, np.ndarray] = {}
    for k, v in cols.items():
        n = v.size
        if n >= _COMPACT_MIN and v.ndim == 1 and v.dtype in (np.float64, np.bool_):
            first = v[0]
            if v.dtype == np.float64:
                bits = v.view(np.int64)
                # never -0.0: Polars takes a literal -0.0 for 0.0 (equal values), and merges
                # the scans of two files whose only difference is that sign (review r37)
                if (not np.isnan(first) and not (first == 0.0 and np.signbit(first))
                        and bool(np.all(bits == bits[0]))):
                    consts[k] = (float(first), pl.Float64())
                    continue
            elif bool(v.all()) or not bool(v.any()):
                consts[k] = (bool(first), pl.Boolean())
                continue
            twin = next((j for j, w in stored.items() if w.dtype == v.dtype
                         and _same_bits(w[:1], v[:1]) and _same_bits(w, v)), None)
            if twin is not None:
                copies[k] = twin
                continue
        stored[k] = v
    return stored, _Layout(consts, copies, names)


def _restored(columns: list[str], consts: dict[str, tuple[Any, pl.DataType]],
              copies: dict[str, str]) -> list[pl.Expr]:
    """``columns`` as expressions over a spill file: constants and copies put back."""
    out: list[pl.Expr] = []
    for c in columns:
        if c in consts:
            value, dtype = consts[c]
            out.append(pl.lit(value, dtype=dtype).alias(c))
        elif c in copies:
            out.append(pl.col(copies[c]).alias(c))
        else:
            out.append(pl.col(c))
    return out


#: The prefix of a report's per-row fingerprint columns (`_RowsSeen`), never a user's column.
_SEEN_FP = f"{_P}seen_fp:"


class _RowsSeen:
    """CONFIDENTIAL: the row count and fingerprints of the rows a report's pass replayed.

    The report's batch function (`_replay_batch`) adds every batch's rows and per-row
    fingerprints (`tabdp.frame._engine._fingerprint`, the hashes the releases summed) as it
    computes their losses: the row check (`_check_rows`) then reads the rows the report was
    computed from, in the same evaluation of the input and without a second scan of it.
    UInt64 sums wrap modulo 2**64, as the engine's sums of the releases' passes do.

    Attributes:
        columns: The fingerprinted columns (the session's bound columns).
    """

    def __init__(self, columns: list[str]) -> None:
        """Nothing seen yet."""
        import threading

        self.columns = list(columns)
        self._rows = 0
        self._sums = dict.fromkeys(self.columns, 0)
        self._lock = threading.Lock()  # the engine may call the batch function from threads

    def add(self, b: pl.DataFrame) -> None:
        """Add one batch's rows and their fingerprints (columns `_SEEN_FP` ``<column>``)."""
        sums = {c: int(np.add.reduce(b[f"{_SEEN_FP}{c}"].to_numpy(), dtype=np.uint64))
                if b.height else 0 for c in self.columns}
        with self._lock:
            self._rows += b.height
            for c, v in sums.items():
                self._sums[c] = (self._sums[c] + v) % (1 << 64)

    def row(self) -> dict[str, Any]:
        """What `_check_rows` reads: ``rows_read`` and ``FP<column>``."""
        with self._lock:
            return {"rows_read": self._rows, **{f"{FP}{c}": v for c, v in self._sums.items()}}


def _replay_batch(sess: Session, programs: list[tuple[int, Program]], report: bool,
                  delta: float | None, targets: frozenset[int], track: bool,
                  spill: _Spill | None = None, seen: _RowsSeen | None = None,
                  in_batch: InBatch | None = None) -> Callable[[pl.Series], pl.Series]:
    """The batch function: replays every program's charges and the budget filter on a batch.

    For each program in release order it computes the batch's charges with the in-memory
    engine's code (`tabdp.frame._engine._charges`), admits them with the session's
    filter against the batch's running totals, and adds the admitted losses to those totals
    in the ledger's order: every double is the one the in-memory ledger would hold.
    ``programs`` pairs each program with the index ``j`` of its columns (``_P c<j>``, ...).

    Output fields: for each released program ``j`` in ``targets`` (the releases of one pass),
    ``_P ok<j>:<currency>`` (admitted) and, with ``track``, the row's ρ and size there
    (``_P crho<j>``, ``_P csize<j>``); with ``report``,
    the running totals ``rho``, ``epsilon``, ``size`` (`_REPORTED`), ``rho_<name>`` per program
    and, with ``delta``, ``epsilon_delta``. With a ``spill`` (a releases' pass, not a report),
    the batch's report rows (row ids, every running total of `COMPONENTS` and ``rho_<name>``
    per program) are also handed to it: the report then needs no replay of its own. With
    ``seen`` (a report), the batch's rows and fingerprints are added to it (the row check).
    The fields of the targets aggregated in the batch function (``in_batch``: the later sets
    of cells of a pass) are handed to it with the batch's columns instead of being returned.
    """
    in_here = frozenset() if in_batch is None else in_batch.targets
    curve = sess.budget is not None and sess.budget.per_currency
    # the running totals kept: what the filter reads ("rho", "rho@<currency>",
    # "size@<currency>") and what the report writes (ε at δ needs every component; a spill
    # keeps them all, the report's δ being chosen later)
    rep = report or spill is not None
    kept = (COMPONENTS if spill is not None or (report and delta is not None)
            else _REPORTED if report else ("rho",))

    def replay(s: pl.Series) -> pl.Series:
        b = s.struct.unnest()
        n = b.height
        if seen is not None:
            seen.add(b)
        acc: dict[str, np.ndarray] = {}

        def lookup(units: Any, cols: list[str]) -> dict[str, np.ndarray]:
            ids = np.asarray(units, dtype=np.int64)
            assert all(c in kept or c.startswith(("rho@", "size@")) for c in cols), cols
            # n increasing positions are every row in order: the totals as they are (read,
            # never written, by the filter), not a gathered copy
            whole = ids.size == n
            return {c: (acc[c] if whole else acc[c][ids]) if c in acc else np.zeros(ids.size)
                    for c in cols}

        # columns whose running totals are another column's, the same array (``rho_z`` is
        # ``rho`` while every release so far charged the same array to both): one addition
        # serves both, the same doubles as two
        twin: dict[str, str] = {}

        def add(ids: np.ndarray, sums: dict[str, np.ndarray], maxes: dict[str, np.ndarray]
                ) -> None:
            # ids are increasing row positions of the batch: n of them are all rows, in order
            # (the same doubles as the indexed update, without gathering and scattering)
            whole = ids.size == n
            for k, j in list(twin.items()):
                if (k in sums) != (j in sums) or (k in sums and sums[k] is not sums[j]):
                    acc[k] = acc[k].copy()  # different terms from now on: its own array
                    del twin[k]
            fresh: dict[int, str] = {}  # this call's new totals, by the array they start from
            for k, v in sums.items():
                if k in twin:
                    continue  # its twin adds the same terms into the same array
                a = acc.get(k)
                if a is None and whole:
                    first = fresh.get(id(v))
                    if first is not None:
                        acc[k] = acc[first]
                        twin[k] = first
                        continue
                    acc[k] = v + 0.0  # 0.0 + v: the same doubles as a sum into zeros
                    fresh[id(v)] = k
                    continue
                if a is None:
                    a = acc[k] = np.zeros(n)
                if whole and not v.any():
                    # zeros (a pure release's approximate parts): fl(a + 0) is exact, so
                    # add_up leaves it as is; the same doubles without its error terms
                    np.add(a, v, out=a)
                    continue
                # rounded up, as the in-memory ledger adds (`add_up`): the same doubles
                add_up_into(a, v, None if whole else ids)
            for k, v in maxes.items():
                a = acc.setdefault(k, np.zeros(n))
                if whole:
                    np.maximum(a, v, out=a)
                else:
                    a[ids] = np.maximum(a[ids], v)

        out: dict[str, Any] = {}
        later: dict[str, Any] = {}  # the fields of the targets aggregated here
        per_prog: dict[str, np.ndarray] = {}
        done: list[tuple[int, Program, np.ndarray, bool, Any]] = []  # charges computed
        for j, prog in programs:
            inside = (b[f"{_P}c{j}"].is_not_null() & (b[f"{_P}r{j}"] > 0)).to_numpy()
            idx = np.flatnonzero(inside)
            summed = prog.measures if prog.kind == "sum" else ()
            cells = track and j in targets
            same = _same_charges(b, done, j, prog, inside, cells)
            if same is not None:
                # an earlier program's charges of the same rows, values and policy: the
                # same arrays (`_charges` is a function of them alone; nothing writes them)
                ch, crho, csize = same
            else:
                # Series, not a select: an eager frame's select plans a lazy query (about
                # 0.5 ms a call, a program and batch at a time)
                mask = None if idx.size == n else pl.Series(inside)

                def inside_of(c: str, mask: pl.Series | None = mask) -> pl.Series:
                    got = b.get_column(c)
                    return got if mask is None else got.filter(mask)

                sub = pl.DataFrame({ROW_ID: idx, _ROWS: inside_of(f"{_P}r{j}"),
                                    **{m: inside_of(f"{_P}v{j}:{m}") for m in summed}})
                ch, crho, csize = _charges(sub, ROW_ID, True, prog.policy, prog.kind,
                                           prog.bits, cells=cells)
                done.append((j, prog, inside, cells, (ch, crho, csize)))
            admitted = sess.admit(ch, lookup)
            losses = ch.losses(admitted)
            ids = np.asarray(losses.units, dtype=np.int64)
            comps = loss_components(losses)
            add(ids, {c: comps[c] for c in kept if c != "size"},
                {"size": comps["size"]} if "size" in kept else {})
            # every row of the batch in a cell: the arrays as they are (read, never written),
            # not scattered into new ones
            every = idx.size == n
            if curve and ch.n:
                for c in ch.currencies:
                    ok = admitted[c]
                    if every and ok.all():
                        add(idx, {f"rho@{c}": ch.rho[c]}, {f"size@{c}": ch.size[c]})
                    else:
                        add(idx[ok], {f"rho@{c}": ch.rho[c][ok]},
                            {f"size@{c}": ch.size[c][ok]})
            if rep:
                if ids.size == n:
                    col = np.asarray(losses.rho, dtype=np.float64)
                else:
                    col = np.zeros(n)
                    col[ids] = losses.rho
                per_prog[f"rho_{prog.name}"] = col
            if j in targets and not report:
                dest = later if j in in_here else out
                for c in ch.currencies:
                    if every:
                        flag = np.asarray(admitted[c], dtype=bool)
                    else:
                        flag = np.zeros(n, dtype=bool)
                        flag[idx] = admitted[c]
                    dest[f"{_P}ok{j}:{c}"] = flag
                if track and every:
                    dest[f"{_P}crho{j}"], dest[f"{_P}csize{j}"] = crho, csize
                elif track:
                    r, z = np.zeros(n), np.zeros(n)
                    r[idx], z[idx] = crho, csize
                    dest[f"{_P}crho{j}"], dest[f"{_P}csize{j}"] = r, z
        if in_batch is not None:
            # hstack, not with_columns (a lazy query's planning, about 3 ms a batch)
            in_batch.add(b.hstack([pl.Series(k, v) for k, v in later.items()]))
        if spill is not None:
            spill.add(b[ROW_ID].to_numpy(),
                      {**{c: acc.get(c, np.zeros(n)) for c in kept}, **per_prog})
        if report:
            tot = {c: acc.get(c, np.zeros(n)) for c in kept}
            out = {**{c: tot[c] for c in _REPORTED}, **per_prog}
            if delta is not None:
                out["epsilon_delta"] = (epsilon_at(delta, tot["rho_z"], tot["rho_g"],
                                                   tot["eps_a"], tot["delta_a"], tot["epsilon"])
                                        if n else np.zeros(0))
        return pl.DataFrame({k: pl.Series(k, v, dtype=pl.Boolean if k.startswith(f"{_P}ok")
                                          else pl.Float64) for k, v in out.items()}).to_struct()

    def run(s: pl.Series) -> pl.Series:
        with engine_thread():  # on each of Polars' threads
            return replay(s)

    return run


def _same_charges(b: pl.DataFrame, done: list[tuple[int, Program, np.ndarray, bool, Any]],
                  j: int, prog: Program, inside: np.ndarray, cells: bool) -> Any:
    """The charges of an earlier program of the batch equal to program ``j``'s, or None.

    Equal when both have the same kind, measures, fixed-point scales and mechanism (equal
    parameters), the same cell audit, and the batch's rows in cells, row counts and
    contributions are the same values: `_charges` reads nothing else (e.g. one column
    released by two groupings, whose cells differ only in which key a row falls in).
    """
    summed = prog.measures if prog.kind == "sum" else ()
    for i, other, was_inside, was_cells, result in done:
        if (other.kind != prog.kind or other.measures != prog.measures
                or other.bits != prog.bits or other.policy.measures != prog.policy.measures
                or was_cells != cells or not _equal_mechanisms(other, prog)
                or not np.array_equal(was_inside, inside)):
            continue
        if all(b[f"{_P}{x}{i}{m}"].equals(b[f"{_P}{x}{j}{m}"], check_names=False)
               for x, m in [("r", ""), *[("v", f":{m}") for m in summed]]):
            return result
    return None


def _equal_mechanisms(a: Program, b: Program) -> bool:
    """Same mechanism class and parameters (False where the parameters do not compare)."""
    try:
        return bool(a.policy.mechanism == b.policy.mechanism)
    except (TypeError, ValueError):  # e.g. array-valued parameters
        return False


def _out_schema(programs: list[Program], report: bool, delta: float | None,
                targets: frozenset[int], track: bool) -> pl.Struct:
    fields: dict[str, Any] = {}
    if report:
        fields |= {c: pl.Float64 for c in _REPORTED}
        fields |= {f"rho_{p.name}": pl.Float64 for p in programs}
        if delta is not None:
            fields["epsilon_delta"] = pl.Float64
    else:
        for j in sorted(targets):  # in the batch function's order (programs in release order)
            fields |= {f"{_P}ok{j}:{c}": pl.Boolean for c, _ in programs[j].policy.currencies()}
            if track:
                fields |= {f"{_P}crho{j}": pl.Float64, f"{_P}csize{j}": pl.Float64}
    return pl.Struct(fields)


def _replayed(sess: Session, lf: pl.LazyFrame, schema: pl.Schema, programs: list[Program],
              report: bool, delta: float | None = None,
              target: int | frozenset[int] | None = None, track: bool = False,
              spill: _Spill | None = None, rows_seen: _RowsSeen | None = None,
              whole: frozenset[int] = frozenset(),
              in_batch: InBatch | None = None) -> pl.LazyFrame:
    """``lf`` (with row ids) plus every program's columns and the replayed batch outputs.

    A report keeps the input's row order (its joins maintain the left order). Program ``target``
    (a release: the last one), or each program of a set of targets (the releases of one pass,
    `StreamingBackend._prefetch`), gets its admission flags ``_P ok<j>:<currency>``: each program's
    flags depend only on the programs before it, so one pass gives every target the flags it
    would get alone. In a session without a budget every record is admitted, so the outputs need
    neither the earlier releases nor (unless ``track``) the batch function: only the targets'
    own columns are computed. A ``spill`` (releases, not a report) is handed every batch's
    report rows: every program is then replayed, and the batch function always runs. With
    ``rows_seen`` (a report) the batch function also reads each row's fingerprints of
    ``rows_seen.columns`` and adds them to it. The targets of ``in_batch`` (a subset of the
    targets: the later sets of cells of a releases' pass) are aggregated by the batch function
    (`InBatch`) instead of having their flags (and cell audits) in the plan's columns; the
    raw columns their aggregations read are handed to it. A report's programs in ``whole``
    (`ReplayLedger.whole`) have every row in a cell (no lookup of their keys).
    """
    targets = (frozenset() if target is None else
               frozenset([target]) if isinstance(target, int) else target)
    indexed = list(enumerate(programs))
    if not report and targets:
        # programs after the last target change nothing a target reads
        indexed = indexed[:max(targets) + 1]
    if not report and sess.budget is None and spill is None:
        indexed = [(j, p) for j, p in indexed if j in targets]
        if not track:
            for j, prog in indexed:
                lf, _ = _program_columns(lf, schema, prog, j, False)
            return lf.with_columns(pl.lit(True).alias(f"{_P}ok{j}:{c}") for j, prog in indexed
                                   for c, _ in prog.policy.currencies())
    inputs: list[str] = []
    seen: dict[tuple[Any, ...], str] = {}
    for j, prog in indexed:
        lf, cols = _program_columns(lf, schema, prog, j, report, seen, magnitudes=report,
                                    whole=j in whole)
        inputs += cols
    if spill is not None:
        inputs.append(ROW_ID)
        spill.names = [p.name for _, p in indexed]
    if rows_seen is not None:
        assert report
        lf = lf.with_columns(_fingerprint(c, schema[c]).alias(f"{_SEEN_FP}{c}")
                             for c in rows_seen.columns)
        inputs += [f"{_SEEN_FP}{c}" for c in rows_seen.columns]
    later = frozenset() if in_batch is None else in_batch.targets
    assert in_batch is None or (later <= targets and not report)
    if in_batch is not None:  # the raw columns its aggregations read (keys, measures)
        inputs += [c for c in in_batch.columns if c not in inputs]
    fn = _replay_batch(sess, indexed, report, delta, targets, track, spill, rows_seen,
                       in_batch)
    dtype = _out_schema(programs, report, delta, targets - later, track)
    out = pl.struct(inputs).map_batches(fn, return_dtype=dtype, is_elementwise=True)
    if report:  # the report's fields (``rho``, ``size``...) next to the input's columns
        out = out.struct.rename_fields([_reported(f.name) for f in dtype.fields])
    return lf.with_columns(out.alias(f"{_P}replay")).unnest(f"{_P}replay")


def _reported(name: str) -> str:
    """The column a report's field (``rho``, ``rho_<release>``...) takes next to the input's.

    Example:
        >>> _reported("rho")
        '__tabdp_out:rho'
    """
    return f"{_P}out:{name}"


def replay_report(ledger: ReplayLedger, sess: Session, delta: float | None,
                  seen: _RowsSeen | None = None) -> pl.LazyFrame:
    """CONFIDENTIAL per-record report of a streaming session, as a lazy plan over its rows.

    Columns as ``Report.per_record``: ``row``, ``rho``, ``epsilon``, ``size``, then
    ``epsilon_delta`` (with a δ) and ``rho_<release>`` per release. Collect it with the
    streaming engine or sink it (``sink_parquet``): it never needs the rows in memory.

    Args:
        ledger: The session's ledger.
        sess: The session.
        delta: Optional δ for the ``epsilon_delta`` column.
        seen: Where the batch function adds the rows it reads and their fingerprints (the
            report's row check, `_report_and_check`), if given.

    Returns:
        A LazyFrame, one row per input row in input order.

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(seed=1, streaming=True)
        >>> df = pl.DataFrame({"c": ["a", "b"], "x": [1.0, 2.0]})
        >>> _ = df.dp.count(by="c", keys=tabdp.KeySet.from_dict(c=["a"]),
        ...                 mechanism=tabdp.mechanisms.Gaussian(2.0), session=s)
        >>> replay_report(s.ledger, s, None).collect()["rho"].to_list()
        [0.125, 0.0]
    """
    lf = ledger.source
    schema = lf.collect_schema()
    names = [f"rho_{p.name}" for p in ledger.programs]
    plan = _replayed(sess, _with_row_ids(lf, schema), schema, ledger.programs, True, delta,
                     rows_seen=seen, whole=frozenset(ledger.whole))
    return plan.select(pl.col(ROW_ID).cast(pl.Int64).alias(sess.unit or "row"),
                       *[pl.col(_reported(c)).alias(c) for c in [
                           "rho", "epsilon", "size",
                           *(["epsilon_delta"] if delta is not None else []), *names]])


def _with_row_ids(lf: pl.LazyFrame, schema: pl.Schema) -> pl.LazyFrame:
    """The input with its row ids: assigned now, or by the caller when it read the input.

    (The release workflow numbers rows before its joins and filters.) The input's other columns
    starting with ``RESERVED`` are dropped: no release reads one (refused for measures, keys and
    units), and the engine's own columns, added next to the input's, take such names.
    """
    unused = [c for c in schema.names() if c.startswith(RESERVED) and c != ROW_ID]
    lf = lf.drop(unused) if unused else lf
    return lf if ROW_ID in schema.names() else lf.with_row_index(ROW_ID)


def _rows_check(sess: Session, lf: pl.LazyFrame, schema: pl.Schema) -> pl.LazyFrame:
    """The row count and fingerprints of the session's bound columns (checked by bind_rows)."""
    fp_cols = binding.of(sess).bound_columns()
    return _with_row_ids(lf, schema).select(
        pl.len().cast(pl.Int64).alias("rows_read"),
        *[_fingerprint(c, schema[c]).sum().alias(f"{FP}{c}") for c in fp_cols])


_REPORT_REFUSED = (
    "the per-record report of a streaming session is recomputed from its input, and the input "
    "no longer holds the rows its releases read (a file rewritten or replaced since, or a plan "
    "that gives other rows on each evaluation), so the report was not produced.\nHint: keep "
    "the input unchanged until the report is written, or give the session a fixed copy (e.g. "
    "lf.collect()); a LazyFrame keeps what it read of a file's metadata when it was created, "
    "so re-create it (pl.scan_parquet(...)) after a file is replaced.")
_RELEASE_REFUSED = (
    "this streaming session's input could not be read as the rows its earlier releases read "
    "(a file rewritten or replaced since, or a plan that fails or gives other rows on each "
    "evaluation), so nothing was drawn or recorded.\nHint: release the unchanged input; a "
    "LazyFrame keeps what it read of a file's metadata when it was created, so re-create it "
    "(pl.scan_parquet(...)) after a file is replaced, and start a new session for new data.")

_T = TypeVar("_T")


def _streamed(query: pl.LazyFrame) -> Callable[[], pl.DataFrame]:
    """``query`` collected by the streaming engine, when called."""
    return lambda: query.collect(engine="streaming")


def _read_input(sess: Session, read: Callable[[], _T], report: bool) -> _T:
    """Evaluate a plan over a streaming session's input; drift is tabdp's refusal, always.

    Once the session has read its rows (or for a report), a failure while reading its input,
    whatever the engine raised (a Polars error, a missing file, a Rust panic, which is a
    ``BaseException``), is the documented refusal: the input is not the rows the session
    read. A first release's own failure is raised as it is (the curator's data).
    """
    try:
        return read()
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise  # (running out of memory is not a changed input; review r35)
    except InvalidParameterError:
        raise  # tabdp's own refusal (the row check)
    except BaseException as err:  # noqa: BLE001 - Rust panics are BaseExceptions
        if not report and binding.of(sess).rows_bound is None:
            raise
        raise InvalidParameterError(_REPORT_REFUSED if report else _RELEASE_REFUSED) from err


def _check_rows(sess: Session, row: dict[str, Any]) -> None:
    """A report's row check: the input must still hold the rows the releases read."""
    try:
        binding.of(sess).bind_rows(int(row["rows_read"]), {c: int(row[f"{FP}{c}"] or 0)
                                               for c in binding.of(sess).bound_columns()})
    except InvalidParameterError as err:
        raise InvalidParameterError(_REPORT_REFUSED) from err


def _checked_source(ledger: ReplayLedger, sess: Session) -> None:
    """Refuse a report whose input no longer holds the rows the releases read (any failure)."""
    def check() -> None:
        schema = ledger.source.collect_schema()
        _require_bound(sess, schema)
        _check_rows(sess, _rows_check(sess, ledger.source, schema).collect(
            engine="streaming").row(0, named=True))

    _read_input(sess, check, report=True)


def collect_report(ledger: ReplayLedger, sess: Session, delta: float | None) -> pl.DataFrame:
    """CONFIDENTIAL per-record report, collected, after checking the input still holds the rows.

    The fingerprints of the session's bound columns are computed in the report's own pass
    and checked before the report is returned: if the input no longer holds the rows the
    releases read (a file rewritten since, a plan that changes between evaluations), the
    report is refused.

    Args:
        ledger: The session's ledger.
        sess: The session.
        delta: Optional δ for the ``epsilon_delta`` column.

    Returns:
        The per-record report (see `replay_report`).

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(seed=1, streaming=True)
        >>> df = pl.DataFrame({"c": ["a", "b"], "x": [1.0, 2.0]})
        >>> _ = df.dp.count(by="c", keys=tabdp.KeySet.from_dict(c=["a"]),
        ...                 mechanism=tabdp.mechanisms.Gaussian(2.0), session=s)
        >>> collect_report(s.ledger, s, None)["rho"].to_list()
        [0.125, 0.0]
    """
    report, row = _read_input(sess, lambda: _report_and_check(ledger, sess, delta, None),
                              report=True)
    _check_rows(sess, row)
    assert isinstance(report, pl.DataFrame)
    return report


def _report_and_check(ledger: ReplayLedger, sess: Session, delta: float | None,
                      sink: Callable[[pl.LazyFrame], pl.LazyFrame] | None
                      ) -> tuple[pl.DataFrame | None, dict[str, Any]]:
    """The report (collected, or written by ``sink``) and the row check, in one pass.

    The row count and fingerprints that `_check_rows` checks are those of the rows the report
    was computed from: the report's batch function adds each batch's rows and fingerprints
    (`_RowsSeen`) as it replays their losses, in the one evaluation of the input that gives
    the report (an input whose rows differ between evaluations is checked on the rows
    reported; no second scan). The caller checks the rows before the report is used or its
    file is put in place.
    """
    schema = ledger.source.collect_schema()
    _require_bound(sess, schema)
    seen = _RowsSeen(binding.of(sess).bound_columns())
    plan = replay_report(ledger, sess, delta, seen)
    if sink is None:
        return plan.collect(engine="streaming"), seen.row()
    sink(plan).collect(engine="streaming")
    return None, seen.row()


def sink_report(ledger: ReplayLedger, sess: Session, delta: float | None, path: Any,
                rename: dict[str, str] | None = None) -> None:
    """Write the CONFIDENTIAL per-record report to Parquet with the engine (never in memory).

    Checked like `collect_report` (in the same pass over the input): the file is written
    under a temporary name in the same folder and put in place (``os.replace``) only once the
    check passed; a failed write or check leaves no file (and an earlier file at ``path``
    untouched).

    Args:
        ledger: The session's ledger.
        sess: The session.
        delta: Optional δ for the ``epsilon_delta`` column.
        path: The Parquet file to write.
        rename: Columns to rename on the way (e.g. ``{"row": "row_id"}``).

    Example:
        >>> import polars as pl, tabdp, tempfile, pathlib
        >>> s = tabdp.Session(seed=1, streaming=True)
        >>> df = pl.DataFrame({"c": ["a", "b"], "x": [1.0, 2.0]})
        >>> _ = df.dp.count(by="c", keys=tabdp.KeySet.from_dict(c=["a"]),
        ...                 mechanism=tabdp.mechanisms.Gaussian(2.0), session=s)
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "r.parquet"
        >>> sink_report(s.ledger, s, None, p)
        >>> pl.read_parquet(p)["rho"].to_list()
        [0.125, 0.0]
    """
    import os
    import pathlib

    # written under a temporary name in the same folder and put in place only once the rows
    # check passed (the report and the check are one pass over the input)
    final = pathlib.Path(path)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.partial")

    def sink(plan: pl.LazyFrame) -> pl.LazyFrame:
        if rename:
            plan = plan.rename(rename)
        return plan.sink_parquet(tmp, lazy=True, row_group_size=PER_RECORD_ROW_GROUP,
                                 **PER_RECORD_PARQUET)

    # the report rows the releases' pass wrote (`_Spill`), if it replayed exactly the ledger's
    # programs over this input and they hold every row once (and, for a report declared
    # before the pass, at this δ: its files hold ε at that δ alone)
    spill: _Spill | None = getattr(ledger, "spill", None)
    files = (spill.files() if spill is not None and spill.source is ledger.source
             and spill.names == [p.name for p in ledger.programs]
             and spill.declared in (None, (delta,)) else None)
    try:
        if files is not None and spill is not None:
            # the input must still hold the rows the releases read (the same check and refusal
            # as the replayed report's); the losses are those the releases' pass computed
            _checked_source(ledger, sess)
            _read_input(sess, lambda: sink(_spilled_report(spill, files, sess, delta, ledger))
                        .collect(engine="streaming"), report=True)
        else:
            _, row = _read_input(sess, lambda: _report_and_check(ledger, sess, delta, sink),
                                 report=True)
            _check_rows(sess, row)
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        if spill is not None:  # used, or stale: its files are removed
            spill.close()
            ledger.keep_spill(None)
    ledger.note_written(final, len(ledger.programs))


def _spilled_report(spill: _Spill, files: list[str], sess: Session, delta: float | None,
                    ledger: ReplayLedger) -> pl.LazyFrame:
    """The per-record report (columns as `replay_report`) from a releases' pass's `_Spill`.

    ε at δ is computed from the spilled components by the report's own function, value by
    value (the same doubles as the replayed report's).
    """
    lf = spill.scan(files)
    extra: list[pl.Expr] = []
    if delta is not None and spill.declared is not None:  # computed as the pass wrote it
        extra = [pl.col("epsilon_delta")]
    elif delta is not None:
        def eps_at(s: pl.Series) -> pl.Series:
            b = s.struct.unnest()
            with engine_thread():
                out = (epsilon_at(delta, *(b[c].to_numpy() for c in _DELTA_PARTS))
                       if b.height else np.zeros(0))
            return pl.Series("epsilon_delta", out, dtype=pl.Float64)

        extra = [pl.struct(list(_DELTA_PARTS)).map_batches(
            eps_at, return_dtype=pl.Float64, is_elementwise=True).alias("epsilon_delta")]
    return lf.select(pl.col(ROW_ID).cast(pl.Int64).alias(sess.unit or "row"),
                     "rho", "epsilon", "size", *extra,
                     *[f"rho_{p.name}" for p in ledger.programs])


#: `epsilon_at`'s arguments after δ, in order.
_DELTA_PARTS = ("rho_z", "rho_g", "eps_a", "delta_a", "epsilon")
#: The components the report reads only for ε at δ (not spilled for a declared report).
_DELTA_ONLY = frozenset(_DELTA_PARTS) - {"epsilon"}


def summarize_report(ledger: ReplayLedger, sess: Session, qs: list[float]) -> dict[str, Any]:
    """CONFIDENTIAL statistics of the records' total ρ, in bounded memory.

    Read from the per-record file `sink_report` wrote if no release was added since (the
    release workflow writes it first), else recomputed from the input (checked like
    `collect_report`). Quantiles are exact (``numpy.quantile``, linear), computed by
    `tabdp.report.streaming.exact_quantiles` without collecting the column.

    Args:
        ledger: The session's ledger.
        sess: The session.
        qs: Quantile levels.

    Returns:
        ``units``, ``rho_max`` and ``rho_q<q>`` per level.

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(seed=1, streaming=True)
        >>> df = pl.DataFrame({"c": ["a", "b"], "x": [1.0, 2.0]})
        >>> _ = df.dp.count(by="c", keys=tabdp.KeySet.from_dict(c=["a"]),
        ...                 mechanism=tabdp.mechanisms.Gaussian(2.0), session=s)
        >>> summarize_report(s.ledger, s, [0.5])
        {'units': 2, 'rho_max': 0.125, 'rho_q0.5': 0.0625}
    """
    written = getattr(ledger, "written", None)
    if written is not None and written[1] == len(ledger.programs) and written[0].exists():
        return _rho_stats(sess, pl.scan_parquet(written[0]).select("rho"), qs)
    # recomputed from the input: the losses are replayed once into a private scratch file,
    # checked on the rows that pass replayed (`_report_and_check`), and the statistics read
    # from that file (they take several passes: each pass over the input itself could read
    # rows other than the checked ones, a plan that changes between evaluations)
    import shutil
    import tempfile

    # 0700, named like a `_Spill` folder: removed below, or swept if this process is killed
    _sweep_stale_spills()
    scratch = tempfile.mkdtemp(prefix=f"{_SPILL_PREFIX}{os.getpid()}-")
    try:
        path = os.path.join(scratch, "rho.parquet")

        def sink(plan: pl.LazyFrame) -> pl.LazyFrame:
            return plan.select("rho").sink_parquet(path, lazy=True, **PER_RECORD_PARQUET)

        _, row = _read_input(sess, lambda: _report_and_check(ledger, sess, None, sink),
                             report=True)
        _check_rows(sess, row)
        return _rho_stats(sess, pl.scan_parquet(path), qs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _rho_stats(sess: Session, lf: pl.LazyFrame, qs: list[float]) -> dict[str, Any]:
    """`summarize_report`'s statistics of the ``rho`` column of ``lf`` (a checked file)."""
    from tabdp.report.streaming import exact_quantiles

    def stats_of() -> dict[str, Any]:
        row = lf.select(pl.len().alias("n"), pl.col("rho").max().alias("max")).collect(
            engine="streaming").row(0, named=True)
        n = int(row["n"])
        stats: dict[str, Any] = {"units": n, "rho_max": float(row["max"]) if n else None}
        if n:
            vals = exact_quantiles(lf, "rho", qs)
            r_inf = lf.select(pl.col("rho").is_infinite().any()).collect(
                engine="streaming").item()
            vals = np.where(np.isnan(vals) & bool(r_inf), np.inf, vals)
            stats |= {f"rho_q{q}": float(v) for q, v in zip(qs, vals, strict=True)}
        return stats

    return _read_input(sess, stats_of, report=True)


def _require_bound(sess: Session, schema: pl.Schema) -> None:
    """Refuse (as the row check does) an input that lacks a column the session bound."""
    state = binding.of(sess)
    missing = [c for c in state.bound_columns() if c not in schema.names()]
    if missing:
        state.bind_rows(state.rows_bound or 0, {})  # raises: the bound columns are absent


class StreamReports:
    """The streaming engine's `tabdp.privacy.ledger.ReportSource`: the report from the input.

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(seed=1, streaming=True)
        >>> _ = pl.DataFrame({"c": ["a"]}).dp.count(by="c", keys=tabdp.KeySet.from_dict(c=["a"]),
        ...     mechanism=tabdp.mechanisms.Gaussian(2.0), session=s)
        >>> s.ledger.reports is STREAM_REPORTS
        True
    """

    def replay(self, ledger: ReplayLedger, session: Session,
               delta: float | None) -> pl.LazyFrame:
        """The report as a lazy plan (`replay_report`)."""
        return replay_report(ledger, session, delta)

    def collect(self, ledger: ReplayLedger, session: Session,
                delta: float | None) -> pl.DataFrame:
        """The report, collected after the rows check (`collect_report`)."""
        return collect_report(ledger, session, delta)

    def sink(self, ledger: ReplayLedger, session: Session, delta: float | None,
             path: str | os.PathLike[str], rename: dict[str, str] | None = None) -> None:
        """The report written to Parquet after the rows check (`sink_report`)."""
        sink_report(ledger, session, delta, path, rename)

    def summary(self, ledger: ReplayLedger, session: Session,
                qs: list[float]) -> dict[str, int | float | None]:
        """The report's ρ statistics (`summarize_report`)."""
        return summarize_report(ledger, session, qs)


#: The report source every streaming release installs in its session's replay ledger.
STREAM_REPORTS = StreamReports()


def _install(ledger: ReplayLedger, prog: Program, source: pl.LazyFrame) -> None:
    """Record a release's definition and the input the report is computed from."""
    ledger.install(prog, source, STREAM_REPORTS)


class Planned(NamedTuple):
    """A streaming release planned but not executed: its checked arguments and definition."""

    op: _Opened
    pre: _Prepared
    kind: str
    keys: KeySet
    rules: _Rules
    policy: _Policy
    bits: dict[str, int]
    nulls: str
    form: str
    cv: bool

    @property
    def by(self) -> list[str]:
        """The group-by columns (as a median's `tabdp.frame._quantiles.PlannedQuantile`)."""
        return self.pre.by

    @property
    def program(self) -> Program:
        """The release's public definition."""
        return Program(self.op.name, self.kind, tuple(self.pre.by), self.keys,
                       tuple(self.pre.measures), self.rules, self.policy, self.bits)


def _count_true(flag: pl.Expr) -> pl.Expr:
    """The number of rows where the Boolean ``flag`` holds (nulls not counted), as an Int64.

    Summed as Booleans and cast once per group: the same counts as casting every row to Int64
    before the sum, for about half the CPU of a counter in a streaming group-by (a Boolean
    sum counts in Polars' row-index type, which holds any frame's number of rows).
    """
    return flag.sum().cast(pl.Int64)


def _release_query(sess: Session, plan: pl.LazyFrame, rel: Planned, k: int,
                   fp_cols: list[str]) -> pl.LazyFrame:
    """The aggregation of release ``rel`` (program ``k`` of ``plan``): one group-by over cells.

    One group-by over the cells (the rows outside the key set form the null group) gives every
    aggregate: exact totals of the admitted contributions, the confidential counters, the row
    fingerprints and, with cell tracking, each cell's worst loss.
    """
    if _unfiltered(sess):
        # every record admitted (`_replayed` gives literal flags): a released cell's total is
        # its admitted total and nothing is left out; one 128-bit sum per measure and row
        parts = {m: _measure_parts(m, rel.op.schema[m], rel.rules) for m in rel.pre.measures}
        return _unfiltered_query(plan, rel, k, fp_cols, _counter_exprs(parts, rel.op.schema))
    groups, aggs = _release_aggs(sess, rel, k, fp_cols)
    return plan.group_by(f"{_P}c{k}", *groups).agg(*aggs).with_columns(_after_aggs(rel, k))


def _release_aggs(sess: Session, rel: Planned, k: int, fp_cols: list[str], tag: str = ""
                  ) -> tuple[list[Any], list[pl.Expr]]:
    """`_release_query`'s group-by columns (after the cell) and aggregations (``tag``: prefix).

    The aggregations are named as `stream_aggregate` reads them, each preceded by ``tag``
    (a tag starts with tabdp's reserved prefix, so no key column takes a tagged name).
    """
    schema, measures, by = rel.op.schema, rel.pre.measures, rel.pre.by
    parts = {m: _measure_parts(m, schema[m], rel.rules) for m in measures}
    counters = _counter_exprs(parts, schema)
    cell, rows = pl.col(f"{_P}c{k}"), pl.col(f"{_P}r{k}")
    inside = cell.is_not_null() & (rows > 0)
    currencies = rel.policy.currencies()
    ok_all = pl.all_horizontal([pl.col(f"{_P}ok{k}:{c}") for c, _ in currencies])
    cur_of = {m: c for c, ms in currencies for m in ms}
    values = [pl.when(pl.col(f"{_P}ok{k}:{cur_of[m]}")).then(pl.col(f"{_P}v{k}:{m}"))
              .otherwise(pl.lit(0, pl.Int128)).sum().alias(m) for m in measures]
    released = pl.when(inside).then(rows).otherwise(0).sum()
    if rel.kind == "count":
        counted = pl.when(pl.col(f"{_P}ok{k}:{currencies[0][0]}")).then(rows).otherwise(0)
        rows_released = [released.cast(pl.Int64).alias(f"{_P}released"),
                         pl.when(inside).then(counted).otherwise(0).sum().alias(_ROWS)]
    else:  # the rows counted are the rows released (`_after_aggs` copies them)
        rows_released = [released.alias(_ROWS)]
    ok_in = inside & ok_all
    aggs = [*values, *rows_released,
            pl.len().cast(pl.Int64).alias(f"{_P}n"),
            rows.sum().cast(pl.Int64).alias(f"{_P}kept"),  # rows no rule dropped
            *[_count_true(e).alias(f"{_P}{name}") for name, e in counters.items()],
            *[_fingerprint(c, schema[c]).sum().alias(f"{FP}{c}") for c in fp_cols],
            _count_true(inside & ~ok_all).alias(f"{_P}left"),
            # what the filter left out (confidential): rows, and each measure's exact parts
            pl.when(inside & ~ok_all).then(rows).otherwise(0).sum().cast(pl.Int64)
            .alias(f"{_P}rows_left"),
            *[pl.when(inside).then(pl.col(f"{_P}v{k}:{m}")).otherwise(pl.lit(0, pl.Int128))
              .sum().alias(f"{_P}tot:{m}") for m in measures],
            *[_count_true(pl.col(f"{_P}v{k}:{m}") < 0).alias(f"{_P}negc:{m}")
              for m in _negatives_counted(rel)]]
    if sess.track_cells:
        aggs += [pl.when(ok_in).then(pl.col(f"{_P}crho{k}")).max().alias(f"{_P}worst_rho"),
                 pl.when(ok_in).then(pl.col(f"{_P}csize{k}")).max().alias(f"{_P}worst_size"),
                 _count_true(ok_in).alias(f"{_P}units")]
    # grouped by cell and keys: a released cell holds one key (its rows' keys convert exactly to
    # it), and the rows outside the key set are grouped by their keys (the distinct keys count).
    # Where a released cell's key is the key set's own value (`_keys_from_cells`), the keys
    # are grouped only outside the key set (hashing every row's keys costs more than the
    # cell's integer) and `stream_aggregate` takes a released cell's keys from the key set
    groups: list[Any] = ([pl.when(cell.is_null()).then(pl.col(c)).alias(c) for c in by]
                         if _keys_from_cells(rel) else list(by))
    if tag:
        aggs = [e.alias(f"{tag}{e.meta.output_name()}") for e in aggs]
    return groups, aggs


def _after_aggs(rel: Planned, k: int) -> list[pl.Expr]:
    """Columns `_release_query` derives from its aggregations (on the cells, not the rows).

    What the filter left out of a released cell is its total less what it admitted: exact in
    128-bit integers (one 128-bit sum per row and measure fewer); the rows outside the key set
    (the null cell) are neither released nor left out. A sum's rows released are its rows.
    """
    cell = pl.col(f"{_P}c{k}")
    return [*([pl.col(_ROWS).cast(pl.Int64).alias(f"{_P}released")] if rel.kind != "count"
              else []),
            *[pl.when(cell.is_not_null()).then(pl.col(f"{_P}tot:{m}") - pl.col(m))
              .otherwise(pl.lit(0, pl.Int128)).alias(f"{_P}lo:{m}") for m in rel.pre.measures]]


def _same_cells(a: Planned, b: Planned) -> bool:
    """Whether two releases of a pass put every row in the same cell (`_cells` alike)."""
    if tuple(a.pre.by) != tuple(b.pre.by) or a.op.schema != b.op.schema:
        return False
    if a.keys is b.keys:
        return True
    # key sets equal by value may differ in dtype (Int32 and Int64, Categorical and String:
    # `KeySet.__eq__` reads values), and the grouping of the first (`_keys_from_cells`)
    # follows its dtypes: only key sets of the same dtypes share it
    if a.keys.to_polars().schema != b.keys.to_polars().schema:
        return False
    da, db = a.keys.domains, b.keys.domains
    same_domains = (da is None and db is None) or (
        da is not None and db is not None and len(da) == len(db)
        and all(x.equals(y) and x.name == y.name for x, y in zip(da, db, strict=True)))
    return same_domains and a.keys == b.keys


def cell_sets(rels: list[Planned]) -> list[list[int]]:
    """The releases (positions in ``rels``) grouped by their cells (`_same_cells`), in order.

    Example:
        >>> cell_sets([])
        []
    """
    sets: list[list[int]] = []
    for i, r in enumerate(rels):
        for group in sets:
            if _same_cells(rels[group[0]], r):
                group.append(i)
                break
        else:
            sets.append([i])
    return sets


def release_queries(sess: Session, plan: pl.LazyFrame, rels: list[Planned], ks: list[int],
                    fp_cols: list[str]
                    ) -> tuple[list[pl.LazyFrame], Callable[[list[pl.DataFrame]],
                                                             list[pl.DataFrame]]]:
    """The aggregations of a pass's releases, one group-by per distinct set of cells.

    Releases over the same cells (same grouping and key set: e.g. a payroll, an employment and
    a count table by county × sector) are aggregated by one group-by, each release's
    aggregations under its own names; the split function gives every release the frame
    `_release_query` would give it alone (the same groups, columns and values), from the
    collected results. Every query fingerprints the rows it read (``fp_cols``), and each
    release's frame holds its query's fingerprints: the queries of one pass may evaluate the
    input once each (a plan whose rows differ between evaluations, e.g. a group-by without
    ``maintain_order``, a shuffle or a file rewritten), so each must be checked against the
    rows the session bound.

    Args:
        sess: The session.
        plan: The pass's replayed plan (`_replayed`).
        rels: The releases, in order.
        ks: Their program indices in ``plan``.
        fp_cols: The columns fingerprinted.

    Returns:
        The queries to collect together, and the function splitting their results per
        release (in the order of ``rels``).
    """
    if _unfiltered(sess):
        queries = [_release_query(sess, plan, r, k, fp_cols)
                   for r, k in zip(rels, ks, strict=True)]
        return queries, lambda got: list(got)
    sets = cell_sets(rels)
    queries = []
    for group in sets:
        groups, aggs = _set_aggregation(sess, rels, ks, group, fp_cols)
        queries.append(plan.group_by(*groups).agg(*aggs))
    return queries, _splitter(rels, ks, sets, fp_cols)


def _set_aggregation(sess: Session, rels: list[Planned], ks: list[int], group: list[int],
                     fp_cols: list[str]) -> tuple[list[Any], list[pl.Expr]]:
    """The group-by columns and aggregations of one set of releases over the same cells.

    The first release's (``fp_cols`` fingerprinted there) and the others' aggregations, each
    under its release's tag (`_tag`), grouped by the set's cell column and keys.
    """
    k0 = ks[group[0]]
    # (tags "__tabdp_t<i>#": no tag is the start of another's, e.g. "t1#" of "t11#"; under
    # the reserved prefix, so no key column takes a tagged name (review r29)
    groups, aggs = _release_aggs(sess, rels[group[0]], k0, fp_cols, _tag(group[0]))
    for i in group[1:]:
        aggs += _release_aggs(sess, rels[i], ks[i], [], _tag(i))[1]
    return [f"{_P}c{k0}", *groups], aggs


def _splitter(rels: list[Planned], ks: list[int], sets: list[list[int]], fp_cols: list[str]
              ) -> Callable[[list[pl.DataFrame]], list[pl.DataFrame]]:
    """`release_queries`' split function: each release's frame from its set's aggregation."""

    def split(got: list[pl.DataFrame]) -> list[pl.DataFrame]:
        out: list[pl.DataFrame | None] = [None] * len(rels)
        for group, frame in zip(sets, got, strict=True):
            k0, tag0 = ks[group[0]], _tag(group[0])
            # the fingerprints of the rows this query read, for each release of the group
            fps = [pl.col(f"{tag0}{FP}{c}").alias(f"{FP}{c}") for c in fp_cols]
            for i in group:
                tag = _tag(i)
                own = [c for c in frame.columns
                       if c.startswith(tag) and not (c[len(tag):].startswith(FP)
                                                     and c[len(tag) + len(FP):] in fp_cols)]
                out[i] = frame.select(
                    pl.col(f"{_P}c{k0}").alias(f"{_P}c{ks[i]}"), *rels[i].pre.by,
                    *[pl.col(c).alias(c[len(tag):]) for c in own], *fps
                ).with_columns(_after_aggs(rels[i], ks[i]))
        return [f for f in out if f is not None]

    return split


#: Aggregations of `_release_aggs` that are maxima (the others are sums and counts).
_MAXIMA = (f"{_P}worst_rho", f"{_P}worst_size")


class InBatch:
    """The aggregations of the later sets of cells of a pass, computed in its batch function.

    A releases' pass over several sets of cells (`tabdp.frame.backends.polars`) replays the
    filter once and aggregates the first set with Polars' streaming group-by; Polars runs one
    group-by of a query at a time and would hold every row of the plan for a second one. The
    other sets' releases are aggregated here instead: the batch function hands every batch
    (its program columns, the raw columns these aggregations read, and the other sets' fresh
    admission flags and cell audits) to `add`, which groups it by each set's cells with the
    aggregations of `release_queries` (`_set_aggregation`) except the row fingerprints (the
    first set's aggregation computes them for every release); the batches' groups are then
    added up (sums and counts added, the cell audits' maxima taken): exactly the aggregation
    of the whole input, from the one evaluation that the first set's aggregation read.

    Thread-safe: Polars may run the batch function on several threads.

    Example:
        >>> InBatch._COMPACT  # batches' groups held per set before they are added up
        32
    """

    #: Batches' groups kept per set before they are added up (bounds the memory held).
    _COMPACT = 32

    def __init__(self, sess: Session, rels: list[Planned], ks: list[int],
                 sets: list[list[int]]) -> None:
        """The releases ``rels`` (program indices ``ks``), grouped in ``sets`` of cells."""
        import threading

        self.rels, self.ks, self.sets = rels, ks, sets
        #: The program indices of the releases aggregated here.
        self.targets = frozenset(ks[i] for group in sets for i in group)
        self._aggs = [_set_aggregation(sess, rels, ks, group, []) for group in sets]
        self._keys = [[g if isinstance(g, str) else g.meta.output_name() for g in groups]
                      for groups, _ in self._aggs]
        flags = {f"{_P}{x}{ks[i]}" for group in sets for i in group for x in ("crho", "csize")}
        flags |= {f"{_P}ok{ks[i]}:{c}" for group in sets for i in group
                  for c, _ in rels[i].policy.currencies()}
        roots: set[str] = set()
        for groups, aggs in self._aggs:
            for e in [*[pl.col(g) if isinstance(g, str) else g for g in groups], *aggs]:
                roots |= set(e.meta.root_names())
        #: The columns the aggregations read that the batch function does not write.
        self.columns = sorted(roots - flags)
        #: The maxima's columns, by their full tagged names: a measure's columns end with its
        #: name, which may end like a maximum's (review r64: ``pay__tabdp_worst_rho``)
        self._maxima = {f"{_tag(i)}{x}" for group in sets for i in group for x in _MAXIMA}
        #: Per set, where its keys are grouped only outside the key set (`_release_aggs`): its
        #: cell column, the key columns and the aggregations' names, for `add`'s batches that
        #: hold no row outside it
        self._by_cell: list[tuple[str, list[str], list[str]] | None] = [
            (str(groups[0]), list(rels[group[0]].pre.by), [a.meta.output_name() for a in aggs])
            if _keys_from_cells(rels[group[0]]) and rels[group[0]].pre.by else None
            for group, (groups, aggs) in zip(sets, self._aggs, strict=True)]
        #: The pass's `_Offload`, where `add` groups its batches (None: on the caller's thread).
        self.offload: _Offload | None = None
        self._parts: list[list[pl.DataFrame]] = [[] for _ in sets]
        self._lock = threading.Lock()

    def add(self, frame: pl.DataFrame) -> None:
        """Group one batch (``frame``: its columns and flags) by each set's cells.

        A batch with no row outside a set's key set (every row in a cell, where the keys are
        grouped only outside it) is grouped by the cell alone, its key columns null: the same
        groups, about a fifth less work. On the pass's `_Offload` thread when there is one.
        """
        if self.offload is not None:
            self.offload.submit(lambda: self._add(frame))
        else:
            self._add(frame)

    def _add(self, frame: pl.DataFrame) -> None:
        for n, (groups, aggs) in enumerate(self._aggs):
            by_cell = self._by_cell[n]
            if by_cell is not None and frame[by_cell[0]].null_count() == 0:
                cell, keys, names = by_cell
                part = frame.group_by(cell).agg(*aggs).select(
                    cell, *[pl.lit(None, frame.schema[c]).alias(c) for c in keys], *names)
            else:
                part = frame.group_by(*groups).agg(*aggs)
            with self._lock:
                self._parts[n].append(part)
                if len(self._parts[n]) >= self._COMPACT:
                    self._parts[n] = [self._added(n, self._parts[n])]

    def _added(self, n: int, parts: list[pl.DataFrame]) -> pl.DataFrame:
        keys = self._keys[n]
        whole = pl.concat(parts, how="vertical")
        return whole.group_by(*keys).agg(
            pl.col(c).max() if c in self._maxima else pl.col(c).sum()
            for c in whole.columns if c not in keys)

    def frames(self) -> list[pl.DataFrame] | None:
        """Every release's frame, as `release_queries`' split gives it (None: no batch)."""
        if any(not p for p in self._parts):
            return None
        got = [self._added(n, p) for n, p in enumerate(self._parts)]
        return _splitter(self.rels, self.ks, self.sets, [])(got)


def _tag(i: int) -> str:
    """The prefix of release ``i``'s aggregations in a query shared by several releases.

    Example:
        >>> _tag(3)
        '__tabdp_t3#'
    """
    return f"{_P}t{i}#"


def _negatives_counted(rel: Planned) -> list[str]:
    """The measures whose negative contributions `stream_aggregate` reads (``_P negc:<m>``).

    Only a sum by a mechanism that needs non-negative totals, whose rules allow negative
    values, checks them; other releases do not count them.
    """
    if (rel.kind == "sum" and bool(rel.pre.mechanism.requires_nonnegative)
            and rel.rules.negatives == "allow"):
        return list(rel.pre.measures)
    return []


def _keys_from_cells(rel: Planned) -> bool:
    """Whether a released cell's keys are the key set's row of that cell, value for value.

    True where every key column has the same text or integer dtype in the data and in the key
    set: a row is in a cell only if its keys equal the cell's (`tabdp.frame._engine._cells`),
    so the cell's keys are the rows' keys (no conversion, no float zero's sign to lose).
    """
    schema, ks = rel.op.schema, rel.keys.to_polars().schema
    return all(c in ks and schema[c] == ks[c]
               and (schema[c] == pl.String or schema[c].is_integer()) for c in rel.pre.by)


def _unfiltered_query(plan: pl.LazyFrame, rel: Planned, k: int, fp_cols: list[str],
                      counters: dict[str, pl.Expr]) -> pl.LazyFrame:
    """`_release_query` of a session without a budget: the same columns, fewer sums per row.

    Every record is admitted, so the admitted sums are the cells' totals (``_P tot``; 0 for
    the rows outside the key set, as there) and the filter leaves nothing out.
    """
    schema, measures, by = rel.op.schema, rel.pre.measures, rel.pre.by
    cell, rows = pl.col(f"{_P}c{k}"), pl.col(f"{_P}r{k}")
    zero = pl.lit(0, pl.Int128)
    aggs = [*[pl.col(f"{_P}v{k}:{m}").sum().alias(m) for m in measures],
            pl.len().cast(pl.Int64).alias(f"{_P}n"),
            rows.sum().cast(pl.Int64).alias(f"{_P}kept"),  # rows no rule dropped
            *[_count_true(e).alias(f"{_P}{name}") for name, e in counters.items()],
            *[_fingerprint(c, schema[c]).sum().alias(f"{FP}{c}") for c in fp_cols],
            *[_count_true(pl.col(f"{_P}v{k}:{m}") < 0).alias(f"{_P}negc:{m}")
              for m in _negatives_counted(rel)]]
    if by and _keys_from_cells(rel):
        # keys of the key set's own dtypes (text or integers): grouped by the keys themselves,
        # each group's cell found afterwards on the groups (`_cells`, a function of the key
        # values alone: every row of a group gets its group's cell), so no row's cell is
        # computed; a row's kept count is 0 or 1 (``rows > 0`` is ``rows``), so the rows
        # released in a group are its rows kept where it is a cell
        grouped = _cells(plan.group_by(*by).agg(*aggs, rows.sum().alias(_ROWS)), schema,
                         rel.keys, list(by), f"{_P}c{k}")
        grouped = grouped.with_columns(
            pl.when(cell.is_not_null()).then(pl.col(_ROWS)).otherwise(0).alias(_ROWS))
    else:
        # grouped by cell, and by the keys only outside the key set (where they are the
        # groups: the distinct keys count)
        inside = cell.is_not_null() & (rows > 0)
        outside = [pl.when(cell.is_null()).then(pl.col(c)).alias(c) for c in by]
        grouped = plan.group_by(f"{_P}c{k}", *outside).agg(
            *aggs, pl.when(inside).then(rows).otherwise(0).sum().alias(_ROWS))
    return grouped.with_columns(
        pl.col(_ROWS).cast(pl.Int64).alias(f"{_P}released"),
        pl.lit(0, pl.Int64).alias(f"{_P}left"), pl.lit(0, pl.Int64).alias(f"{_P}rows_left"),
        *[pl.when(cell.is_not_null()).then(pl.col(m)).otherwise(zero).alias(f"{_P}tot:{m}")
          for m in measures],
        *[zero.alias(f"{_P}lo:{m}") for m in measures])


#: The key under which a streaming release keeps its aggregation for a count of the same cells.
_CELLS_KEPT = "streaming cells"


def _unfiltered(sess: Session) -> bool:
    """Whether every record is admitted and no cell is audited (`_unfiltered_query`'s case)."""
    return sess.budget is None and not sess.track_cells


def keep_aggregation(rel: Planned, grouped: pl.DataFrame, k: int, fp_cols: list[str]) -> None:
    """Keep a release's aggregation (its own pass) for a later count of the same cells.

    Kept for a LazyFrame input (a plan, unchanged by anyone) in a session that admits every
    record without auditing cells: `count_from_kept` then reads a count of the same frame
    object, grouping and key-set object from it instead of reading the input again. The
    aggregation holds one row per cell and key (the key set's size), the session's one kept
    evaluation (`tabdp.frame.binding.keep_snapshot`).

    Args:
        rel: The release, aggregated by `_unfiltered_query`.
        grouped: Its aggregation.
        k: Its program index.
        fp_cols: The columns fingerprinted in the pass.
    """
    sess, native = rel.op.session, rel.op.native
    if not (_unfiltered(sess) and isinstance(native, pl.LazyFrame)):
        return
    keep_snapshot(sess, _CELLS_KEPT, {
        "native": native, "by": tuple(rel.pre.by), "keys": rel.keys, "grouped": grouped,
        "cell": f"{_P}c{k}", "fp": frozenset(fp_cols), "after": k + 1})


def count_from_kept(rel: Planned, k: int, fp_cols: list[str]) -> pl.DataFrame | None:
    """A count's aggregation from the last release's pass over the same cells, or ``None``.

    A count without columns keeps every row (Δ = 1 row), so its aggregation by cell and keys is
    the row count of each group of an aggregation of the same rows by the same cells: the
    previous release's (`keep_aggregation`), when it was the session's last release, of the
    same LazyFrame object, grouping and key-set object, in a session that admits every record
    (no budget) and audits no cell, and it fingerprinted every column this count must. The
    result has the columns `_unfiltered_query` gives the count (program ``k``), with the same
    values: the rows read, the same fingerprints (the same rows), no counters.

    Args:
        rel: The count.
        k: Its program index.
        fp_cols: The columns it fingerprints.

    Returns:
        Its aggregation, or ``None`` when it needs a pass of its own.
    """
    sess, native = rel.op.session, rel.op.native
    if rel.kind != "count" or rel.pre.measures or not _unfiltered(sess):
        return None
    kept = cached_snapshot(sess, _CELLS_KEPT)
    if (kept is None or kept["native"] is not native or kept["keys"] is not rel.keys
            or kept["by"] != tuple(rel.pre.by) or kept["after"] != k
            or not set(fp_cols) <= kept["fp"]):
        return None
    grouped: pl.DataFrame = kept["grouped"]
    cell = pl.col(kept["cell"])
    rows = pl.when(cell.is_not_null()).then(pl.col(f"{_P}n")).otherwise(0).cast(pl.Int64)
    return grouped.select(
        cell.alias(f"{_P}c{k}"), *rel.pre.by, rows.alias(_ROWS), pl.col(f"{_P}n"),
        pl.col(f"{_P}n").alias(f"{_P}kept"),  # a count keeps every row
        *[pl.col(f"{FP}{c}") for c in fp_cols], rows.alias(f"{_P}released"),
        pl.lit(0, pl.Int64).alias(f"{_P}left"), pl.lit(0, pl.Int64).alias(f"{_P}rows_left"))


def _fingerprinted(sess: Session, rels: list[Planned]) -> list[str]:
    """The columns a batch fingerprints: those its releases read, and those the session bound.

    Every release of the batch checks them all (each release's pass reads them all).
    """
    schema = rels[0].op.schema
    read = [c for r in rels for c in (*r.pre.by, *r.pre.measures)]
    return _fp_columns(schema, read, binding.of(sess).bound_columns())


def stream_aggregate(rel: Planned, grouped: pl.DataFrame, k: int, fp_cols: list[str],
                     fingerprints: dict[str, int] | None = None) -> Aggregated:
    """Checks, rows bound and the cell totals of a release from its streaming aggregation.

    Args:
        rel: The planned release (program ``k`` of the replayed plan).
        grouped: The result of `_release_query`.
        k: The release's program index.
        fp_cols: The fingerprinted columns.
        fingerprints: Their sums over the rows, when the pass computed them in another
            release's aggregation (`pass_fingerprints`); else read from ``grouped``.

    Returns:
        The cell totals and the confidential summaries, for the pipeline
        (`tabdp.frame.pipeline.execute`).
    """
    op, pre, kind, keys, rules = rel.op, rel.pre, rel.kind, rel.keys, rel.rules
    sess = op.session
    measures, by = pre.measures, pre.by
    parts = {m: _measure_parts(m, op.schema[m], rules) for m in measures}
    counters = _counter_exprs(parts, op.schema)
    needs_nonneg = bool(pre.mechanism.requires_nonnegative) and kind == "sum"
    sums = [*[f"{_P}{c}" for c in counters],
            f"{_P}n", f"{_P}released", f"{_P}left", f"{_P}rows_left",
            *[f"{_P}negc:{m}" for m in _negatives_counted(rel)],
            *[f"{_P}tot:{m}" for m in measures],
            *[f"{_P}lo:{m}" for m in measures]]
    row = grouped.select(*[pl.col(c).sum() for c in sums]).row(0, named=True)
    fps = (pass_fingerprints(grouped, fp_cols) if fingerprints is None else fingerprints)
    row["rows_read"] = row[f"{_P}n"] or 0
    counts = {name: int(row[f"{_P}{name}"] or 0) for name in counters}
    neg_contrib = ({m: int(row[f"{_P}negc:{m}"] or 0) for m in measures}
                   if needs_nonneg and rules.negatives == "allow" else {})
    _strict_checks(counts, measures, None, rules, needs_nonneg, neg_contrib)
    binding.of(sess).bind_rows(int(row["rows_read"]),
                               {c: fps[c] for c in fp_cols})

    n_keys = len(keys) if by else 1
    released = grouped.filter(pl.col(f"{_P}c{k}").is_not_null())
    # rows outside the key set that no rule dropped (a row a rule dropped is counted by the
    # rule's counter only, as a median's: each row read is counted once)
    outside = grouped.filter(pl.col(f"{_P}c{k}").is_null() & (pl.col(f"{_P}kept") > 0))
    per_cell = released.group_by(f"{_P}c{k}").agg(pl.col(*measures, _ROWS).sum())
    full = pl.DataFrame({_CELL: pl.int_range(n_keys, dtype=pl.Int64, eager=True)}).join(
        per_cell.select(pl.col(f"{_P}c{k}").cast(pl.Int64).alias(_CELL), *measures, _ROWS),
        on=_CELL, how="left", maintain_order="left")
    cells = None
    if sess.track_cells:
        audited = released.filter(pl.col(f"{_P}units") > 0)
        if by and _keys_from_cells(rel):  # grouped by cell alone (`_release_query`)
            audited = audited.drop(by).hstack(
                keys.to_polars().select(by)[audited[f"{_P}c{k}"].cast(pl.Int64).to_numpy()])
        # the audit's public names, once the measures (one may be named ``units``) are gone
        cells = (audited.select(*by, *[pl.col(f"{_P}{c}").alias(c)
                                       for c in ("worst_rho", "worst_size", "units")])
                 .sort(["worst_rho", *by], descending=[True, *[False] * len(by)],
                       nulls_last=True, maintain_order=True))
    return Aggregated(
        full=full, key_dtypes=_output_dtypes(op, sess, measures),
        rows_read=int(row["rows_read"]), rows_outside=int(outside[f"{_P}kept"].sum() or 0),
        cells_outside=outside.height if by else 0,
        rows_released=int(row[f"{_P}released"] or 0), units_left_out=int(row[f"{_P}left"] or 0),
        left_out=left_out_counts(kind, measures, rel.bits,
                                 {m: int(row[f"{_P}tot:{m}"] or 0) for m in measures},
                                 {m: int(row[f"{_P}lo:{m}"] or 0) for m in measures},
                                 int(row[f"{_P}rows_left"] or 0)),
        # as the in-memory ledger: each row is in one cell, so max_cells drops nothing
        cells_dropped=0, rule_counts=_rule_counts(counts, measures, rel.nulls, rules),
        cells=cells)


def pass_fingerprints(grouped: pl.DataFrame, fp_cols: list[str]) -> dict[str, int]:
    """The fingerprints of a pass's rows from one of its aggregations (`_release_query`).

    Every release of one pass reads the same rows, so one aggregation holds them for all.
    """
    row = grouped.select(pl.col(f"{FP}{c}").sum() for c in fp_cols).row(0, named=True)
    return {c: int(row[f"{FP}{c}"] or 0) for c in fp_cols}


def check_batch(rels: list[Planned]) -> None:
    """Refuse releases planned together over several sessions or inputs (no data read).

    Also refuse names taken since planning (a plan executed twice, plans concatenated, a
    release made between planning and executing): names label the per-record report.
    """
    if rels and any(r.op.session is not rels[0].op.session
                    or r.op.native is not rels[0].op.native for r in rels):
        raise InvalidParameterError(
            "releases executed together must share one session and one input frame.\n"
            "Hint: release other frames or sessions in separate calls.")
    if rels:
        names = [r.op.name for r in rels]
        low = [n.lower() for n in names]  # in any letter case, as `Session.release_name`
        taken = {r.name.lower() for r in rels[0].op.session.records}
        clash = sorted({n for n, n_low in zip(names, low, strict=True)
                        if n_low in taken or low.count(n_low) > 1})
        if clash:
            raise InvalidParameterError(
                f"release name(s) {clash} are already used in this session or twice in these "
                "planned releases (in any letter case; a plan is executed once, in the session "
                "it was planned for); names label the per-record report columns.\nHint: plan "
                "the releases again with planned_releases(...) just before executing them.")


def streaming_quantile_data(op: _Opened, column: str, by: list[str], keys: KeySet, nulls: str,
                            policy_mechanism: Any) -> tuple[Any, ...]:
    """A median's or quantile's admitted values per cell, in a streaming session.

    Its charges are those of a count (each row kept by the nulls rule pays the group-privacy
    policy at Δ = 1 row), replayed with every earlier release to apply the budget filter. The
    values of the admitted rows of released cells come back (an exact quantile needs them);
    nothing per row is kept afterwards.

    Args:
        op: The opened release.
        column: The measure.
        by: Group-by columns.
        keys: The public key set.
        nulls: The nulls rule.
        policy_mechanism: The release's group-privacy policy (a mechanism-like object).

    Returns:
        ``(codes, values, rows_read, rows_outside, rows_released, left_out, rows_left_out,
        counts, commit)``: the cell of each admitted value, the values (missing ones 0), the
        confidential counts (``rows_released``: rows in released cells before the filter;
        ``left_out`` and ``rows_left_out``: the units and their rows the filter left out
        there), and ``commit()``,
        which records the release's definition in the ledger (call it when the release is
        recorded).

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(seed=1, streaming=True)
        >>> df = pl.DataFrame({"c": ["a", "a", "b"], "x": [1.0, 2.0, 9.0]})
        >>> out = df.dp.median("x", by="c", keys=tabdp.KeySet.from_dict(c=["a", "b"]),
        ...                    bounds=(0, 10), epsilon=1.0, session=s)
        >>> s.report().per_record.height
        3
    """
    sess, qname, schema = op.session, op.name, op.schema
    ledger = sess.ledger
    assert isinstance(ledger, ReplayLedger)
    rules = _Rules(nulls, "allow", sess.mode)
    prog = Program(qname, "count", tuple(by), keys, (column,), rules,
                   _Policy(policy_mechanism, []), {})
    programs = [*ledger.programs, prog]
    k = len(programs) - 1
    parts = {column: _measure_parts(column, schema[column], rules)}
    counters = {f"missing:{column}": parts[column]["missing"],
                f"inf:{column}": parts[column]["inf"]}
    fp_cols = _fp_columns(schema, [*by, column], binding.of(sess).bound_columns())
    _require_bound(sess, schema)
    plan = _replayed(sess, _with_row_ids(op.lf, schema), schema, programs, False, None, k)
    cell, rows = pl.col(f"{_P}c{k}"), pl.col(f"{_P}r{k}")
    inside = cell.is_not_null() & (rows > 0)
    ok = pl.col(f"{_P}ok{k}:{prog.policy.currencies()[0][0]}")
    x = pl.col(column).cast(pl.Float64)
    value = pl.when(parts[column]["bad"]).then(0.0).otherwise(x)
    query = plan.group_by(f"{_P}c{k}").agg(
        pl.len().cast(pl.Int64).alias(f"{_P}n"),
        *[_count_true(e).alias(f"{_P}{name}") for name, e in counters.items()],
        *[_fingerprint(c, schema[c]).sum().alias(f"{FP}{c}") for c in fp_cols],
        _count_true(rows > 0).alias(f"{_P}kept"),
        _count_true(inside & ~ok).alias(f"{_P}left"),
        # rows in released cells before the filter and those left out (a sum's counters)
        pl.when(inside).then(rows).otherwise(0).sum().cast(pl.Int64).alias(f"{_P}released"),
        pl.when(inside & ~ok).then(rows).otherwise(0).sum().cast(pl.Int64)
        .alias(f"{_P}rows_left"),
        value.filter(inside & ok).alias(f"{_P}values"))
    grouped = _read_input(sess, _streamed(query), report=False)
    summed = [f"{_P}n", f"{_P}left", f"{_P}released", f"{_P}rows_left",
              *[f"{_P}{c}" for c in counters]]
    row = grouped.select(*[pl.col(c).sum() for c in summed],
                         *[pl.col(f"{FP}{c}").sum() for c in fp_cols]).row(0, named=True)
    counts = {name: int(row[f"{_P}{name}"] or 0) for name in counters}
    _strict_checks(counts, [column], None, rules, False, {})
    binding.of(sess).bind_rows(int(row[f"{_P}n"] or 0),
                               {c: int(row[f"{FP}{c}"] or 0) for c in fp_cols})
    outside = int(grouped.filter(pl.col(f"{_P}c{k}").is_null())[f"{_P}kept"].sum() or 0)
    kept = (grouped.filter(pl.col(f"{_P}c{k}").is_not_null())
            .select(pl.col(f"{_P}c{k}").cast(pl.Int64).alias("cell"), f"{_P}values")
            .explode(f"{_P}values"))
    kept = kept.filter(pl.col(f"{_P}values").is_not_null())

    def commit() -> None:
        _install(ledger, prog, op.lf)

    return (kept["cell"].to_numpy(), kept[f"{_P}values"].to_numpy(), int(row[f"{_P}n"] or 0),
            outside, int(row[f"{_P}released"] or 0), int(row[f"{_P}left"] or 0),
            int(row[f"{_P}rows_left"] or 0), counts, commit)
