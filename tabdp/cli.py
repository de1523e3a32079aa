"""The ``tabdp`` command: validate, plan and run release specs.

Usage::

    tabdp validate release.toml          # check the spec, that its input exists and (curator
                                         # mode) its columns against the input's schema
                                         # (Parquet metadata); reads no data
    tabdp plan release.toml [--out DIR]  # mechanisms, policy curves, expected errors, forecast
                                         # shares of flagged/negative cells, the guarantee in
                                         # words; no data
    tabdp run release.toml [--overwrite] # the release: public and confidential folders
    tabdp run release.toml --form wide   # public tables one row per cell (default: the
                                         # spec's output.form, long)
    tabdp run release.toml --test-seed   # a seeded spec (tests only): public folder marked
                                         # NOT FOR PUBLICATION
    tabdp run release.toml --engine spark [--spark-master URL]
                                         # read and release the input in Spark (default
                                         # master local[2]); the same outputs
    tabdp demo [--out DIR]               # the bundled example on the sample data
    tabdp ledger init PATH --series S --lifetime-budget B
                                         # CURATOR ONLY: start a release series' ledger
    tabdp ledger verify PATH [--series S]
                                         # CURATOR ONLY: check a lifetime ledger's owner-only
                                         # modes (every path), hash chain,
                                         # bytes, anchor, and that its state is the sum of its
                                         # history (exit 0 only for an intact ledger;
                                         # --bytes-only: without that last check)
    tabdp ledger show PATH [--series S]  # CURATOR ONLY: verify, then print its releases
                                         # (--bytes-only as for verify)
    tabdp ledger accept-restore PATH [--series S]
                                         # CURATOR ONLY: accept a deliberately restored (older)
                                         # copy of a ledger: its anchor takes the folder's head
    tabdp compare release.toml [--sdc OPTIONS] [--out DIR]
                                         # CURATOR ONLY: the DP release against cell
                                         # suppression or rounding (Tau-Argus), audited

``validate`` and ``plan`` print a ``WARNING: <key path>: <problem>`` line for each setting that
cannot publish usable cells (`tabdp.planning.spec_usability_issues`: public parameters
only); the exit code stays 0.

``validate``, ``plan`` and ``run`` take ``--curator CONFIG``: the curator's configuration
(`curator_config`: datasets, public metadata folders, output root, defaults),
read from the environment variable ``TABDP_CURATOR`` when the flag is absent. An author-mode
spec (``input.mode = "author"``) needs it: it names a dataset and public files by name only,
its outputs go under the curator's output root, and the command's messages quote no server
path of the configuration.

Exit codes:

====  ==========================================================================
0     success
2     spec or usage error, found before any data is read (malformed spec, bad
      option, output folder exists or cannot be created, input file missing, a
      column of the spec missing from the input's schema or of the wrong type,
      seeded spec without --test-seed)
4     data-dependent failure: the run stopped after reading the data; the message
      is always the same and the details are only in the confidential folder
      (failure.json); nothing public is written
70    internal error before any data was read (a bug in tabdp: please report it)
====  ==========================================================================

Exit code 3 (budget exceeded) is no longer used: a failure that depends on the data, budgets
included, is exit 4 with the same message as every other. Nothing public is written when a
command fails.

A reader that closes stdout or stderr early (``tabdp run spec | head -1``) only ends the
printing to that stream (pointed at ``os.devnull`` from then on); the command goes on and exits
with its own code, 0 for a release whose outputs were all written (141 is never used).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast, overload

from tabdp.exceptions import (
    BudgetExceededError,
    CalibrationError,
    ColumnNotFoundError,
    ColumnTypeError,
    DataValidationError,
    InvalidParameterError,
    LedgerError,
    SpecError,
    TabdpError,
    UnsupportedBackendError,
)

if TYPE_CHECKING:
    from tabdp.release.curator_config import CuratorConfig
    from tabdp.release.spec import ReleaseSpec

__all__ = ["main", "EXIT_OK", "EXIT_USAGE", "EXIT_BUDGET", "EXIT_DATA", "EXIT_INTERNAL"]

EXIT_OK = 0
EXIT_USAGE = 2
#: Deprecated, never returned: a budget (like every data-dependent failure) is ``EXIT_DATA``.
EXIT_BUDGET = 3
#: Data-dependent failure: details only in the confidential folder.
EXIT_DATA = 4
EXIT_INTERNAL = 70


def exit_code(err: BaseException) -> int:
    """The documented exit code of an error.

    Args:
        err: The exception that ended the command.

    Returns:
        2 (spec/usage, data-independent), 4 (data: after the run read the data) or 70
        (internal, before any data was read).

    Example:
        >>> exit_code(SpecError("tables[0].kind", "bad")), exit_code(KeyError("x"))
        (2, 70)
    """
    from tabdp.release.runner import DataDependentFailure

    if isinstance(err, (DataDependentFailure, BudgetExceededError, DataValidationError,
                        ColumnNotFoundError, ColumnTypeError)):
        return EXIT_DATA
    if isinstance(err, (SpecError, InvalidParameterError, CalibrationError,
                        UnsupportedBackendError, LedgerError)):
        return EXIT_USAGE
    return EXIT_INTERNAL


class _ReaderMayLeave:
    """A text stream whose reader may stop reading early (``tabdp run spec | head -1``).

    The first ``BrokenPipeError`` (EPIPE) on a write or a flush ends the printing to that
    stream quietly: later writes are dropped, and a stream on a file descriptor (the process's
    stdout or stderr) has that descriptor pointed at ``os.devnull``, so that the interpreter's
    flush at exit does not raise either (the Python docs' "Note on SIGPIPE"). Any other
    ``OSError`` of the stream itself (a full disk behind ``> file``, an I/O error) ends it the
    same way, and so does a stream that does not exist (``sys.stdout`` is None when the
    process started with that descriptor closed, ``>&-``). Nothing else changes: the command
    goes on, writes the rest to the other stream, and keeps its exit code. A stream that cannot
    take the printing is the caller's doing, never the data's, and it is never reported as a
    path that cannot be used.

    Example:
        >>> import io
        >>> class Gone(io.StringIO):
        ...     def write(self, text):
        ...         raise BrokenPipeError(32, "Broken pipe")
        >>> s = _ReaderMayLeave(Gone())
        >>> s.write("done"), s.broken
        (4, True)
    """

    def __init__(self, stream: TextIO | None) -> None:
        import io

        # no stream at all (a descriptor closed at start-up): nothing is printed
        self.broken = stream is None
        self.stream: TextIO = io.StringIO() if stream is None else stream

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self.stream.write(text)
            except OSError:  # EPIPE, ENOSPC, EIO...: the stream, not the run, failed
                self._leave()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self.stream.flush()
            except OSError:
                self._leave()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def _leave(self) -> None:
        import os

        self.broken = True
        try:
            fd = self.stream.fileno()
        except (OSError, ValueError):  # not on a descriptor (a StringIO): nothing to redirect
            return
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, fd)
            finally:
                os.close(null)
        except OSError:  # the interpreter's flush at exit may then complain: nothing else
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class _WorkShare:
    """The share of a release's expected work done at each progress step, from public counts.

    ``run_release`` reports ``(step, steps, what)``: step 1 releases every table (one pass over
    the input each, reported per table as ``"<name>: reading and aggregating the input"``, then
    ``"<name>: drawing noise ..."``), then one step per rollup, then the writing of the outputs,
    where the confidential per-record file is one more pass over the input. Equal steps would
    show 1/12 for most of a large run; here each table's pass weighs ``RELEASE`` (its reading
    and aggregation ``READ`` of it), each rollup ``ROLLUP``, the public files ``PUBLIC`` and the
    per-record file ``PER_RECORD``. The counts come from the steps' own (public) messages: the
    number of tables from ``"releasing K tables"``, the number of rollups from ``steps``. The
    share never decreases; messages of another form fall back to equal steps.

    Example:
        >>> share = _WorkShare()
        >>> share(1, 4, "releasing 2 tables (10 cells)")
        0.0
        >>> round(share(1, 4, "a: drawing noise for 5 cells"), 3)   # table 1 of 2 read
        0.242
        >>> round(share(2, 4, "rolling a up to b"), 3)               # both tables done
        0.606
    """

    READ = 0.8
    RELEASE = 1.0
    ROLLUP = 0.1
    PUBLIC = 0.1
    PER_RECORD = 1.0

    def __init__(self) -> None:
        self.tables: int | None = None
        self.names: list[str] = []
        self.last = 0.0

    def __call__(self, i: int, n: int, what: str) -> float:
        """The share done when step ``i`` of ``n`` reports ``what`` (in [0, 1], never less)."""
        self.last = max(self.last, min(max(self._share(i, n, what), 0.0), 1.0))
        return self.last

    def _share(self, i: int, n: int, what: str) -> float:
        if self.tables is None:
            m = re.match(r"releasing (\d+) tables?\b", what)
            if i != 1 or m is None:
                return (i - 1) / max(n, 1)
            self.tables = int(m.group(1))
        k, rollups = self.tables, max(n - 2, 0)
        total = k * self.RELEASE + rollups * self.ROLLUP + self.PUBLIC + self.PER_RECORD
        if i <= 1:
            name, sep, phase = what.partition(": ")
            if not sep:
                return 0.0
            if name not in self.names:
                self.names.append(name)
            before = min(len(self.names) - 1, k - 1) * self.RELEASE
            read = 0.0 if phase.startswith("reading") else self.READ
            return (before + read) / total
        done = k * self.RELEASE
        if i < n:
            return (done + (i - 2) * self.ROLLUP) / total
        done += rollups * self.ROLLUP
        return (done + (self.PUBLIC if "confidential/" in what else 0.0)) / total


class _Bar:
    """A plain progress bar on stderr.

    On a terminal (the operator's) it is drawn live, with the elapsed time. Otherwise (a log,
    a validation server) the step lines are held back and written only when the run succeeds
    (`flush`): they are then the same for every dataset, whereas lines written as they
    come would tell how far a failed run got, and times how long the data took.
    """

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self.tty = stream.isatty()
        self.t0 = time.monotonic()
        self.held: list[str] = []
        self.share = _WorkShare()
        self._line = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __call__(self, i: int, n: int, what: str) -> None:
        if not self.enabled:
            return
        width = 24
        share = self.share(i, n, what)   # weighted by expected work, not by step count
        done = int(width * share)
        line = f"[{'#' * done}{'.' * (width - done)}] {100 * share:3.0f}% {i}/{n} {what}"
        if not self.tty:
            self.held.append(line + "\n")
            return
        with self._lock:
            self._line = line
            self._draw()
        if self._ticker is None:
            # redraw the elapsed time while a long step (a scan, a write) runs
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def _draw(self) -> None:
        self.stream.write(f"\r\x1b[2K{self._line} ({time.monotonic() - self.t0:.1f}s)")
        self.stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                if self._line:
                    self._draw()

    def close(self) -> None:
        """Stop redrawing and end the live line (terminal only)."""
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            self._ticker = None
            with self._lock:
                if self._line:
                    self._draw()
                    self.stream.write("\n")
                    self.stream.flush()
                    self._line = ""

    def flush(self) -> None:
        """Write the held step lines (after a successful run)."""
        if self.held:
            self.stream.write("".join(self.held))
            self.stream.flush()
            self.held = []


class _RunEngines(Sequence[str]):
    """The choices of ``tabdp run --engine``: `tabdp.frame.backends.RUN_ENGINES`, the one list.

    Read when first needed (``--engine`` parsed, or the help printed), so that the CLI's
    start-up imports no engine.

    Example:
        >>> list(_RunEngines())
        ['polars', 'spark']
    """

    def _names(self) -> tuple[str, ...]:
        from tabdp.frame.backends import RUN_ENGINES

        return RUN_ENGINES

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...
    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        """The ``i``-th engine."""
        return self._names()[i]

    def __len__(self) -> int:
        """How many engines."""
        return len(self._names())


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tabdp",
        description="Differentially private tables with per-record guarantees: validate, plan "
                    "and run release specs (release.toml).",
        epilog="Exit codes: 0 ok, 2 spec/usage error (before any data is read), 4 "
               "data-dependent failure (details only in the confidential folder), 70 internal "
               "error. Nothing public is written when a command fails.")
    from tabdp._version import __version__

    p.add_argument("--version", action="version", version=f"tabdp {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    curator_help = ("the curator's configuration (TOML: datasets, public metadata folders, "
                    "output root, defaults); required by author-mode specs; default: the "
                    "environment variable TABDP_CURATOR")
    v = sub.add_parser("validate", help="check a spec (reads no data)")
    v.add_argument("spec", type=Path)
    v.add_argument("--curator", type=Path, default=None, metavar="CONFIG", help=curator_help)
    pl_ = sub.add_parser("plan", help="mechanisms, policy curves and expected errors "
                                      "(reads no data)")
    pl_.add_argument("spec", type=Path)
    pl_.add_argument("--curator", type=Path, default=None, metavar="CONFIG", help=curator_help)
    pl_.add_argument("--out", type=Path, default=None,
                     help="folder for plan.json and plan.html (default: the spec's output.plan)")
    pl_.add_argument("--overwrite", action="store_true", help="replace an existing plan folder")
    pl_.add_argument("--compare", action="store_true",
                     help="also forecast the DP side of `tabdp compare` (public inputs only)")
    r = sub.add_parser("run", help="run the release")
    r.add_argument("spec", type=Path)
    r.add_argument("--curator", type=Path, default=None, metavar="CONFIG", help=curator_help)
    r.add_argument("--overwrite", action="store_true",
                   help="replace an existing release (default: refuse); what the "
                        "confidential folder holds besides a release's files (a tabdp "
                        "compare comparison, say) is kept")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument("--form", choices=("long", "wide"), default=None,
                   help="form of the public tables: long (one row per cell and measure) or "
                        "wide (one row per cell); default: the spec's output.form (long)")
    r.add_argument("--test-seed", action="store_true",
                   help="allow a spec with [randomness] seed (tests only): the public folder "
                        "is marked NOT FOR PUBLICATION")
    r.add_argument("--engine", choices=_RunEngines(), default=None, metavar="ENGINE",
                   help="where the input is read and released, one of %(choices)s: polars "
                        "(default, this machine) or spark (pip install 'tabdp[spark]' and Java; "
                        "the same outputs, per-record data stays in Spark; input.table needs it)")
    r.add_argument("--spark-master", default=None, metavar="URL",
                   help="with --engine spark: the master of the Spark session to start, e.g. "
                        "local[4], spark://host:7077 or yarn (default: local[2]; an active "
                        "session of this process is used as it is)")
    c = sub.add_parser("compare", help="CURATOR ONLY: the DP release against cell suppression "
                                       "or rounding (Tau-Argus) on the true data; writes only "
                                       "to the comparison folder (default: <confidential>/"
                                       "compare), never to the public folder; a lifetime "
                                       "ledger ([ledger]) is read, never charged")
    c.add_argument("spec", type=Path)
    c.add_argument("--sdc", default=None, metavar="OPTIONS",
                   help="traditional release, e.g. \"p=10; nk=2,85; freq=3; secondary=MOD\" "
                        "(secondary OPT, MOD or RND; base=N for RND; time=N: the solver's time "
                        "limit in minutes; linked=auto|on|off: tables sharing cells protected "
                        "as linked tables; default p=10; secondary=MOD; time=10; linked=auto). "
                        "Needs pip install 'tabdp[sdc]'")
    c.add_argument("--out", type=Path, default=None,
                   help="comparison folder (default: <confidential>/compare; never inside the "
                        "public folder)")
    c.add_argument("--overwrite", action="store_true", help="replace an existing comparison")
    c.add_argument("--test-seed", action="store_true",
                   help="allow a spec with [randomness] seed (tests only)")
    ta = c.add_mutually_exclusive_group()
    ta.add_argument("--no-tau-audit", action="store_true",
                    help="skip Tau-Argus' own audit and its check against the LP audit "
                         "(default: run on tables of at most 5,000 cells)")
    ta.add_argument("--tau-audit", action="store_true",
                    help="run Tau-Argus' own audit on every table, however large (slow: "
                         "over 46 minutes on a 60,000-cell table)")
    d = sub.add_parser("demo", help="run the bundled example spec on the bundled synthetic "
                                    "sample (tabdp.datasets)")
    d.add_argument("--out", type=Path, default=None,
                   help="folder for the demo outputs (default: ./tabdp-demo); a folder an "
                        "earlier tabdp demo made (it holds TABDP_DEMO.txt) is replaced, any "
                        "other existing, non-empty folder is refused and left untouched")
    d.add_argument("--overwrite", action="store_true",
                   help="accepted for compatibility: a folder tabdp demo made is always "
                        "replaced, and any other never")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    d.add_argument("--form", choices=("long", "wide"), default=None,
                   help="form of the public tables (default: long)")
    lg = sub.add_parser("ledger", help="CURATOR ONLY: verify or show a lifetime ledger (the "
                                       "per-unit losses of a release series)")
    lsub = lg.add_subparsers(dest="ledger_command", required=True, metavar="ACTION")
    for action, text in (("verify", "check that every file and folder is owner-only (0600 / "
                                    "0700, no link, FIFO or device), the hash chain, the "
                                    "order of the releases, the "
                                    "bytes of every file, the anchor, and that each unit's "
                                    "lifetime totals are the sum of its releases' losses in "
                                    "the history (exit 0 only if intact, else 2)"),
                         ("show", "verify, then print the series and one line per release")):
        a = lsub.add_parser(action, help=text)
        a.add_argument("path", type=Path, help="the ledger folder")
        a.add_argument("--series", default=None,
                       help="the release series the ledger must belong to")
        a.add_argument("--bytes-only", action="store_true",
                       help="check the chain, the anchor and every file's bytes but do not "
                            "recompute the state from the history (faster: reads no table; "
                            "a state rewritten with its hash in the chain and the anchor is "
                            "then not found)")
    a = lsub.add_parser("accept-restore", help=(
        "accept the ledger folder as it is although it does not match its anchor (the chain "
        "head kept next to it, .<name>.head.json): after a deliberate restore of an older "
        "copy whose later releases were never published. Verifies the folder (its bytes, "
        "and its state against its history, as verify does), then rewrites the anchor to its "
        "head"))
    a.add_argument("path", type=Path, help="the ledger folder")
    a.add_argument("--series", default=None,
                   help="the release series the ledger must belong to")
    a = lsub.add_parser("init", help="start a release series: create its ledger (a run never "
                                     "creates one, so a vanished ledger is refused)")
    a.add_argument("path", type=Path, help="the new ledger folder (must not exist)")
    a.add_argument("--series", required=True, help="the release series' name")
    a.add_argument("--lifetime-budget", required=True,
                   help="each unit's lifetime rho: a number, or a JSON curve "
                        "'{\"1\": 4.0, \"1e6\": 12.0}' (size: rho)")
    a.add_argument("--start-over", action="store_true",
                   help="start a new series although the anchor next to PATH records releases "
                        "of an earlier one whose folder is gone (their losses no longer count)")
    return p


def _lifetime_budget_arg(text: str) -> float | dict[float, float]:
    """``--lifetime-budget``: a number, or a JSON object ``{size: rho}``."""
    import json

    try:
        return float(text)
    except ValueError:
        pass
    try:
        obj = json.loads(text)
        if not isinstance(obj, dict):
            raise ValueError
        return {float(k): float(v) for k, v in obj.items()}
    except (ValueError, TypeError):
        raise InvalidParameterError(
            f"--lifetime-budget must be a number or a JSON object {{size: rho}}; got {text!r}."
            "\nHint: --lifetime-budget 4.0, or --lifetime-budget '{\"1\": 4.0, \"1e6\": "
            "12.0}'.") from None


def _refuse_under_author_only(args: argparse.Namespace, tool: str, why: str) -> None:
    """Refuse a curator-only tool under a configuration serving authors (``author_only``).

    Review R15: a server for authors refused curator-mode specs in validate / plan / run, but
    ``tabdp compare`` read one's ``input.path`` and wrote unprotected values; the ledger
    commands name server paths too, and so does ``tabdp demo --out`` (review R16).
    """
    import os

    from tabdp.release.curator_config import CURATOR_ENV, load_curator_config

    # TABDP_CURATOR: the server's configuration, if any (the demo reads no other: its spec is
    # the bundled curator-mode example)
    where = (_curator_path(args) if args.command != "demo" else
             (Path(os.environ[CURATOR_ENV]) if os.environ.get(CURATOR_ENV) else None))
    if where is None:
        return
    config = load_curator_config(where)
    if args.command != "demo":  # the demo's own spec is read without it
        args.curator_config = config
    if config.author_only:
        raise SpecError("policy.author_only", "the curator configuration serves query authors "
                        f"([policy] author_only = true), and {tool} is a curator-only tool: "
                        f"{why}. Nothing was read or written.\nHint: the curator runs it "
                        "without that configuration (TABDP_CURATOR unset).")


#: How ``tabdp ledger verify`` and ``accept-restore`` qualify the chain head they print.
HEAD_CONFIDENTIAL = "CONFIDENTIAL: keep it in your records, never publish it"
#: The last line of ``tabdp ledger show``: its counts and hashes are the curator's.
SHOW_CONFIDENTIAL = (
    "CONFIDENTIAL (the curator's): the units charged and in the ledger are exact counts of "
    "the records, and the entry hashes and chain head hash the ledger's confidential files; "
    "never publish this listing (the releases' names and curves are public in their "
    "summary.json).")


def _cmd_ledger(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``tabdp ledger verify|show|init|accept-restore PATH``: exit 0 only for an intact ledger.

    A ledger that is not owner-only (every path named), holds a link or a special file, does
    not verify, or does not match its anchor, is a ``LedgerError`` (exit 2). ``verify``,
    ``show`` (without ``--bytes-only``) and ``accept-restore`` also recompute every unit's
    lifetime totals from the history and refuse a state that is not their sum
    (`verify_ledger`'s ``recompute``); the message gives counts and release numbers, never a
    unit id or a loss. The ledger's warnings (an anchor written for a ledger that had none,
    an accepted restore) are the curator's: written to ``err`` as ``warning:`` lines. They are
    this verification's own notices (`verify_ledger`'s ``_notes``), never warnings recorded
    while it ran: recording is process-wide and would print another thread's as the ledger's.
    What it prints is the curator's: ``show`` ends with `SHOW_CONFIDENTIAL` (its units
    charged and in the ledger are exact counts of the records), and the chain head that
    ``verify`` and ``accept-restore`` print is marked `HEAD_CONFIDENTIAL`.
    """
    from tabdp.privacy.lifetime import Ledger, iter_show, verify_ledger

    _refuse_under_author_only(args, f"tabdp ledger {args.ledger_command}",
                              "it names a ledger folder on the server and shows or creates "
                              "its confidential records")
    if args.ledger_command == "init":
        with Ledger.create(args.path, series=args.series,
                           lifetime_budget=_lifetime_budget_arg(args.lifetime_budget),
                           start_over=args.start_over):
            pass
        out.write(f"ledger {args.path}: series {args.series!r} started (0 releases); "
                  "give its path in [ledger] of the series' spec\n")
        return EXIT_OK
    accept = args.ledger_command == "accept-restore"
    recompute = not getattr(args, "bytes_only", False)
    # the ledger's own notices, from this call alone: recording warnings (catch_warnings) is
    # process-wide and would print another thread's warning as the ledger's
    notes: list[str] = []
    entries, _ = verify_ledger(args.path, series=args.series, lock=True,
                               accept_restore=accept, recompute=recompute, _notes=notes,
                               _quiet=True)
    for note in notes:
        err.write(f"tabdp ledger {args.ledger_command}: warning: {note}\n")
    if args.ledger_command == "show":
        for line in iter_show(entries):
            out.write(line + "\n")
        # the counts are exact statistics of the records, the hashes hash confidential files
        out.write(SHOW_CONFIDENTIAL + "\n")
    if accept:
        changed = bool(notes)
        out.write(f"ledger {args.path}: " + ("restore accepted: its anchor now records "
                                             if changed else "its anchor already recorded ")
                  + f"{len(entries) - 1} release(s) of series {entries[0]['series']!r} "
                  f"(chain head {entries[-1]['hash']}; {HEAD_CONFIDENTIAL})\n")
        return EXIT_OK
    # a warning: the anchor was missing (no release yet) and written now, never "matched"
    anchored = ("its anchor was written now (see the warning)" if notes
                else "it matches its anchor")
    summed = ("its state is the sum of its history" if recompute else
              "bytes only: the state was not recomputed from the history")
    out.write(f"ledger {args.path}: intact ({len(entries) - 1} release(s) of series "
              f"{entries[0]['series']!r}; chain head {entries[-1]['hash']} "
              f"({HEAD_CONFIDENTIAL}); {anchored}; {summed})\n")
    return EXIT_OK


def _example_spec() -> Path:
    from tabdp.datasets import example_spec_path

    return example_spec_path()


#: The file ``tabdp demo`` writes into its --out folder: the demo replaces only such a folder.
DEMO_MARKER = "TABDP_DEMO.txt"


def _claim_demo_folder(folder: Path) -> None:
    """Make ``folder`` the demo's (marker file), or refuse one the demo did not make.

    A missing or empty folder becomes the demo's; one holding `DEMO_MARKER` (an earlier
    demo's) is the demo's already, and its outputs are replaced. Any other existing folder is
    refused, untouched: the demo never deletes files it did not create (review r51: it
    replaced ``public/`` and ``confidential/`` of any folder, a user's files in them
    included). A folder holding only ``public/`` and ``confidential/`` is refused too: that is
    also the shape of a real release (``<output root>/<release name>/``; review r52: the
    demo replaced one, its ledger.json and per-record losses included), so the folder of a
    demo made before the marker existed must be removed by hand.

    Raises:
        InvalidParameterError: ``folder`` exists and is not the demo's (or is a file).
    """
    if folder.exists() and not folder.is_dir():
        raise InvalidParameterError(
            f"the demo folder {str(folder)!r} exists and is not a folder.\nHint: pass "
            "another --out (a new folder), or remove that file.")
    if folder.is_dir() and not (folder / DEMO_MARKER).is_file() and any(folder.iterdir()):
        raise InvalidParameterError(
            f"the demo folder {str(folder)!r} already exists and was not made by tabdp demo "
            f"(it has no {DEMO_MARKER}); the demo replaces only folders it made itself, so "
            "nothing was written or deleted.\nHint: pass another --out (a new folder), or "
            f"remove that folder if nothing in it is yours (an older tabdp's demo folder has no "
            f"{DEMO_MARKER}: remove it).")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / DEMO_MARKER).write_text(
        "This folder was made by `tabdp demo` (the bundled example spec on the bundled "
        "synthetic sample).\nThe next `tabdp demo` writing here replaces its public/ and "
        "confidential/ folders: keep no files of yours in it.\n", encoding="utf-8")


def _curator_path(args: argparse.Namespace) -> Path | None:
    """``--curator``, else the environment variable ``TABDP_CURATOR`` (empty: none)."""
    import os

    from tabdp.release.curator_config import CURATOR_ENV

    if args.command == "demo":  # the bundled example is a curator-mode spec of its own
        return None
    given = getattr(args, "curator", None)
    env = os.environ.get(CURATOR_ENV, "")
    if given is not None:
        if env and os.path.realpath(given) != os.path.realpath(env):
            _refuse_other_curator(Path(env))
        return Path(given)
    return Path(env) if env else None


def _refuse_other_curator(server: Path) -> None:
    """``--curator`` naming another file than ``TABDP_CURATOR``: refused on a server for authors.

    Review rev62a: under a configuration with ``[policy] author_only`` an author could pass
    ``--curator`` naming their own configuration (one declaring any server path) or any server
    file, whose error (missing, not TOML) told whether it exists: a partition folder's file
    exists exactly when some record is in it. The given file is not read.
    """
    from tabdp.release.curator_config import load_curator_config

    if load_curator_config(server).author_only:
        raise SpecError("--curator", "this server's curator configuration (TABDP_CURATOR) "
                                     "serves query authors ([policy] author_only = true), so "
                                     "--curator may not name another configuration. Nothing "
                                     "was read or written.\nHint: remove --curator (the "
                                     "server's configuration applies).")


def _load(args: argparse.Namespace, spec_path: Path) -> ReleaseSpec:
    """The spec of the command, read with the curator configuration if one is given."""
    from tabdp.release.curator_config import load_curator_config
    from tabdp.release.spec import load_spec

    where = _curator_path(args)
    config = load_curator_config(where) if where is not None else None
    args.curator_config = config
    # under [policy] author_only, load_spec reports a path in a dataset or ledger as not found
    spec = load_spec(spec_path, curator=config)
    args.spec_read = True  # (`_shown`: the spec's real path may now be named in messages)
    return spec


def _author_spec(spec_path: Path) -> bool:
    """Whether the spec file says ``input.mode = "author"`` (read as text; False if unreadable)."""
    import tomllib

    try:
        data = tomllib.loads(Path(spec_path).read_text("utf-8"))
    except (OSError, ValueError):
        return False
    inp = data.get("input")
    return isinstance(inp, dict) and inp.get("mode") == "author"


def _redact(text: str, config: CuratorConfig | None) -> str:
    """Author mode: the curator configuration's server paths replaced by what they are."""
    if config is None:
        return text
    names: list[tuple[str, str]] = []
    for name, d in config.datasets.items():
        if d.path is not None:
            names.append((str(d.path), f"<dataset {name!r}>"))
        if d.ledger is not None:
            names.append((str(d.ledger), f"<ledger of dataset {name!r}>"))
    for i, f in enumerate(config.public_folders):
        names.append((str(f), f"<public folder {i + 1}>"))
    if config.output_root is not None:
        names.append((str(config.output_root), "<curator output root>"))
    if config.path is not None:
        names.append((str(config.path), "<curator configuration>"))
    import os

    for raw, shown in sorted(names, key=lambda x: -len(x[0])):
        for form in {raw, os.path.realpath(raw)}:
            text = text.replace(form, shown)
    return text


def _cmd_validate(args: argparse.Namespace, out: TextIO) -> int:
    from tabdp.release.input_schema import check_spec_input_schema
    from tabdp.release.runner import check_input_present

    spec = _load(args, args.spec)
    check_input_present(spec)  # the file or folder exists (nothing is read)
    # curator mode: the spec's columns against the input's schema (Parquet metadata only)
    check_spec_input_schema(spec)
    n_roll = sum(len(t.rollups) for t in spec.tables)
    out.write(f"{args.spec}: valid. Release {spec.release.name!r}: {len(spec.tables)} table(s), "
              f"{n_roll} rollup(s); unit {spec.input.unit or 'row'}; {spec.input.mode} mode; "
              f"randomness {'seeded (TESTS ONLY)' if spec.seed is not None else 'secure'}.\n")
    # the hash of the redacted spec: the file's own hash covers the seed
    out.write(f"  sha256 (spec without [randomness]) {spec.public_sha256}\n")
    _write_usability(spec, out)
    from tabdp.release.runner import left_out_sizes

    _write_left_out_sizes(left_out_sizes(spec), spec.input.unit or "record", out)
    if spec.ledger is not None:
        from tabdp.release.runner import plan_summary

        _write_lifetime(plan_summary(spec).get("lifetime"), out)
    return EXIT_OK


def _write_lifetime(life: dict[str, Any] | None, out: TextIO) -> None:
    """Public: ``[ledger]``'s lifetime guarantee in words (the spec and curves only)."""
    if not life:
        return
    out.write(f"Lifetime guarantee of the series {life['series']!r} in words:\n")
    for line in life["guarantee_in_words"]:
        out.write(f"  {line}\n")


def _write_left_out_sizes(rows: list[dict[str, Any]], unit: str, out: TextIO) -> None:
    """Public: the record sizes the budget leaves out of each table, from the curves alone."""
    from tabdp.release.runner import left_out_sizes_in_words

    lines = left_out_sizes_in_words(rows, unit)
    if not rows:
        return
    if all(r["left_out_from"] is None for r in rows):
        out.write("Budget: no record size is left out of any table (planned curves, one cell "
                  "per table; sizes up to the most a record can contribute):\n")
    else:
        out.write("Budget: record sizes left out (from the public curves; left-out units' "
                  "contributions are missing from the totals, a bias sd/moe do not include):\n")
    for line in lines:
        out.write(f"  {line}\n")
    for r in rows:
        if r["plan_sizes_left_out"]:
            sizes = ", ".join(f"{x:g}" for x in r["plan_sizes_left_out"])
            out.write(f"WARNING: budget: plausible {unit} sizes ({sizes}, from "
                      f"plan.record_sizes) are left out of {r['table']} ({r['currency']}); raise "
                      "the budget at those sizes or lower the table's losses.\n")
        elif r["currency"] == "rows" and r["left_out_from"] is not None:
            out.write(f"WARNING: budget: every {unit} counted in {r['table']} is left out; "
                      "raise the budget or lower the table's losses.\n")


def _write_usability(spec: object, out: TextIO) -> int:
    """WARNING lines for the spec's usability problems (public parameters only)."""
    from tabdp.planning import spec_usability_issues

    found = spec_usability_issues(spec)
    for path, msg in found:
        out.write(f"WARNING: {path}: {msg}\n")
    return len(found)


def _fmt(x: float | None) -> str:
    return "inf" if x is None else f"{x:.4g}"


def _cmd_plan(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from tabdp.release.runner import plan_summary, write_plan

    spec = _load(args, args.spec)
    if spec.input.mode == "author" and args.out is not None:
        raise SpecError("--out", "is not allowed with an author-mode spec: the author names no "
                                 "server folder; the plan goes to the curator's output root, "
                                 "in <release.name>/plan.\nHint: remove --out.")
    if args.overwrite:  # author mode: not another spec's release folder
        from tabdp.release.curator_config import check_author_overwrite

        check_author_overwrite(spec, args.curator_config)
    with _rolled_forward_notices(err):
        folder = write_plan(spec, args.out, overwrite=args.overwrite)
    s = plan_summary(spec)
    sizes = s["record_sizes"]
    out.write(f"Plan of release {spec.release.name!r} (no data read)\n")
    head = "".join(f"{x:>10.0e}" for x in sizes)
    for t in s["tables"]:
        params = ", ".join(f"{k}={v}" for k, v in t["mechanism"]["params"].items())
        # the count's definition from the spec (distinct units, or rows capped per unit)
        what = (f"count ({t['statistic']})" if t["kind"] == "count" and t.get("statistic")
                else "count" if t["kind"] == "count" else f"sum of {', '.join(t['measures'])}")
        out.write(f"\n{t['name']}: {what} by {', '.join(t['by']) or '(national)'}; "
                  f"{t['cells']:,} cells\n")
        out.write(f"  mechanism {t['mechanism']['class']}({params}); guarantee "
                  f"{t['guarantee']}\n")
        out.write(f"  {'record size':<36}{head}\n")
        out.write(f"  {'rho of a unit in this table':<36}" + "".join(
            f"{_fmt(r['rho']):>10}" for r in t["table_policy_curve"]) + "\n")
        for m, rows in t["expected_error"].items():
            cells = "  ".join(f"{r['total']:.0e}: ±{_fmt(r['moe'])}" for r in rows)
            out.write(f"  {m} margin of error ({s['release']['level']:.0%}) by cell total: "
                      f"{cells}\n")
        cons = t.get("consistent")
        if cons:
            shares = cons.get("shares")
            out.write(f"  consistent: measured levels {', '.join(cons['measured'])}"
                      + (f"; shares {', '.join(f'{k}={v:g}' for k, v in shares.items())}"
                         if shares else "") + "\n")
            for m, rows in (cons.get("expected_sd") or {}).items():
                if rows:
                    cells = "  ".join(f"{r['level']}: {_fmt(r['sd_median'])} "
                                      f"(rollup {_fmt(r['rollup_sd_median'])})" for r in rows)
                    out.write(f"  {m} expected sd (median cell) by level: {cells}\n")
        if t["forecast"]:
            flag = "  ".join(f"{r['total']:.0e}: "
                             + ("-" if r["p_flagged"] is None else f"{r['p_flagged']:.0%}")
                             for r in t["forecast"])
            neg = "  ".join(f"{r['total']:.0e}: {r['p_negative']:.0%}" for r in t["forecast"])
            out.write(f"  forecast share of cells flagged C, by cell total: {flag}\n")
            out.write(f"  forecast share of cells negative (N), by cell total: {neg}\n")
        out.write("  guarantee in words:\n")
        for line in t["guarantee_in_words"]:
            out.write(f"    {line}\n")
    out.write(f"\n{'Total: record size':<38}{head}\n")
    out.write(f"{'Total rho per unit (pessimistic)*':<38}" + "".join(
        f"{_fmt(r['rho']):>10}" for r in s["total_policy_curve"]) + "\n")
    out.write(f"* {s['total_policy_curve_description']}.\n")
    out.write(f"These curves bound the loss of {s['curves_hold_for']}.\n")
    out.write("Guarantee of the whole release in words:\n")
    for line in s["guarantee_in_words"]:
        out.write(f"  {line}\n")
    _write_lifetime(s.get("lifetime"), out)
    for issue in s["usability_issues"]:
        out.write(f"WARNING: {issue['path']}: {issue['message']}\n")
    over = [r for r in s["budget_check"] if r["exceeds"]]
    if over:
        sizes_txt = ", ".join(f"{r['delta']:g} (planned {_fmt(r['planned_rho'])} > "
                              f"limit {r['limit']:.4g})" for r in over)
        out.write(f"\nWARNING: the planned worst-case total exceeds the budget at record sizes "
                  f"{sizes_txt}. Units of those sizes that contribute to every table may reach "
                  "the budget at run time; raise the budget or lower the losses.\n")
    elif s["budget_check"]:
        out.write("\nBudget: the planned worst-case total is within the budget at every record "
                  "size shown.\n")
    if s["left_out_sizes"]:
        out.write("\n")
        _write_left_out_sizes(s["left_out_sizes"], spec.input.unit or "record", out)
    shown = (f"{spec.release.name}/plan under the curator's output root"
             if spec.input.mode == "author" else str(folder))
    out.write(f"\nPlan written to {shown} (plan.json, plan.html)\n")
    if getattr(args, "compare", False):
        _write_compare_plan(spec, out)
    return EXIT_OK


def _write_compare_plan(spec: object, out: TextIO) -> None:
    """``tabdp plan --compare``: the DP side of a comparison, from public inputs only."""
    from tabdp.compare.core import compare_plan

    p = compare_plan(spec)
    out.write("\nComparison forecast, DP side (no data read):\n")
    for t in p["tables"]:
        lim = t["smallest_usable_total"]
        out.write(f"  {t['table']}: {t['cells']:,} cells; cells of total "
                  + (f">= {lim:.0e} expected usable (flagged C with probability < 50%)"
                     if lim is not None else "shown: none expected usable") + "\n")
    pairs = [f"{r['size']:.0e}: {_fmt(r['epsilon_delta'])} -> "
             f"{_fmt(r['posterior_odds_factor'])}" for r in p["loss"]]
    out.write("  per-record loss over the release (record size: epsilon at delta -> "
              "e^epsilon, the factor of the (epsilon, delta) bound, which adds delta):\n    "
              + "  ".join(pairs) + "\n")
    out.write(f"  traditional side: {p['traditional']}\n")


def _cmd_compare(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from tabdp.compare import compare

    _refuse_under_author_only(args, "tabdp compare", "it reads the confidential data and "
                              "writes unprotected values")

    res = compare(args.spec, args.sdc, out=args.out, overwrite=args.overwrite,
                  test_seed=args.test_seed, tau_audit=(False if args.no_tau_audit
                                                         else True if args.tau_audit else None),
                  progress=lambda s: None if err.write(f"compare: {s}\n") else None)
    s = res.summary
    out.write(f"Comparison of release {s['release']!r} done (CONFIDENTIAL: never publish).\n")
    out.write(f"  Traditional release: {s['sdc']['described']}\n")
    pinned = s["risk"]["sdc"]["records_pinned"]
    out.write(f"  Audit: {pinned} primary cell(s) pinned within their rule's protection.\n")
    out.write(f"  Outputs: {res.folder}  (compare_report.html, compare.json, "
              "sdc_cells.parquet, dp_release/)\n")
    life = s.get("lifetime_ledger") or {}
    if life.get("applied"):
        gone = [f"{t}: {v['units']}" for t, v in (life.get("left_out") or {}).items()
                if v.get("units")]
        out.write(f"  Lifetime ledger {life['ledger']}: read, NOT charged. The DP side left "
                  "out the units at their lifetime budget as tabdp run would ("
                  + ("units left out per table: " + ", ".join(gone) if gone else
                     "no unit left out") + "; compare.json, lifetime_ledger; curator only).\n")
    return EXIT_OK


def _cmd_run(args: argparse.Namespace, out: TextIO, err: TextIO, spec_path: Path,
             overwrite: bool) -> int:
    from tabdp.release.runner import run_release

    spec = _load(args, spec_path)
    master = getattr(args, "spark_master", None)
    config = getattr(args, "curator_config", None)
    if spec.input.mode == "author":
        if master is not None:
            # review rev62a: the author names no cluster either (a master of theirs would get
            # the run's tasks, the data they read and the Spark configuration's credentials)
            raise SpecError("--spark-master", "is not allowed with an author-mode spec: the "
                                              "author names nothing on the server, and a Spark "
                                              "master receives the run's data; the curator's "
                                              "configuration sets it ([engine] spark_master). "
                                              "Nothing was read or written.\nHint: remove "
                                              "--spark-master.")
        if config is not None:
            from tabdp.frame.backends import configured_master

            master = configured_master(getattr(args, "engine", None), config.spark_master)
    if getattr(args, "out", None) is not None:
        import dataclasses

        spec = dataclasses.replace(spec, output=dataclasses.replace(
            spec.output, public=args.out / "public", confidential=args.out / "confidential",
            plan=args.out / "plan"))
    if getattr(args, "form", None) is not None:
        import dataclasses

        spec = dataclasses.replace(spec, output=dataclasses.replace(spec.output,
                                                                    form=args.form))
    if overwrite:  # author mode: not another spec's release folder
        from tabdp.release.curator_config import check_author_overwrite

        check_author_overwrite(spec, getattr(args, "curator_config", None))
    import contextlib
    import warnings

    from tabdp._warnroute import thread_warnings
    from tabdp.exceptions import CoverageWarning, RolledForwardWarning

    author = spec.input.mode == "author"
    # curator mode: the warnings of the run's own thread, shown once it ends; another thread's
    # pass on as they came (never recorded process-wide: review stop 65)
    caught: list[warnings.WarningMessage] = []
    # author mode: exactly the notices run_release addresses to the author (a dataset ledger's
    # anchor notices, naming the dataset); nothing else is recorded, so every other warning
    # given while the run runs (a library's, another thread's) goes to Python's handler: the
    # confidential stderr.log while the run lasts, never the author's terminal
    notices: list[tuple[type[Warning], str]] = []
    done = False
    try:
        with contextlib.ExitStack() as stack:
            shown = err
            if author and getattr(err, "stream", err) is sys.stderr:
                shown = cast("TextIO", _ReaderMayLeave(stack.enter_context(
                    _native_stderr_to_confidential(spec.output.confidential))))
            bar = _Bar(shown, not args.quiet)
            try:
                with warnings.catch_warnings(), contextlib.ExitStack() as collect:
                    warnings.simplefilter("always", CoverageWarning)
                    warnings.simplefilter("always", RolledForwardWarning)
                    if not author:
                        caught = collect.enter_context(thread_warnings())
                    engine = getattr(args, "engine", None)  # None: run_release's default
                    res = run_release(spec, overwrite=overwrite, progress=bar,
                                      test_seed=getattr(args, "test_seed", False),
                                      **({} if engine is None else {"engine": engine}),
                                      spark_master=master,
                                      _notices=notices if author else None)
            finally:
                bar.close()
            bar.flush()
        done = True
    finally:
        # the clean-up put a killed run's release in place: said also when the run then stops
        # (its folders now exist); curator mode only (run_release emits none in author mode)
        _write_rolled_forward(caught, err)
        if author:
            # also when the run stops (a ledger refused after its anchor was written): the
            # author's notices are public words, the same on every dataset
            _write_author_notices(notices)
        elif not done:
            # a run that stops still tells the curator what it warned of before it stopped
            # (a ledger's rerun warning, coverage); an author-mode run that stops says nothing
            # more than its failure message and its notices (the rest is the curator's)
            _write_run_warnings(caught, err)
    _write_run_warnings(caught, err)
    out.write(f"Release {spec.release.name!r} done.\n")
    if spec.seed is not None:
        out.write("  WARNING: seeded randomness (--test-seed): for tests only; the public "
                  "folder is marked NOT FOR PUBLICATION.\n")
    n_tables = sum(f.endswith(".parquet") for f in res.files)
    public, confidential = str(res.public), str(res.confidential)
    if spec.input.mode == "author":  # the curator's server paths are not the author's
        public = f"{spec.release.name}/public under the curator's output root"
        confidential = f"{spec.release.name}/confidential (curator only)"
    out.write(f"  Public outputs:       {public}  (summary.html, manifest.json, "
              f"{n_tables} table(s))\n")
    out.write(f"  Confidential outputs: {confidential}  (per_record_losses.parquet, "
              "confidential_report.html: never publish)\n")
    from tabdp.release.runner import left_out_filters

    # a lifetime ledger is an individual filter too (review: a ledger-only spec told the
    # curator nothing of the units its lifetime budget left out)
    by = left_out_filters(spec)
    if by is not None:
        _write_left_out(res.left_out, err, by)
    return EXIT_OK


def _write_run_warnings(caught: list[warnings.WarningMessage], err: TextIO) -> None:
    """The warnings a run caught, shown: coverage to the curator, the others as warnings."""
    from tabdp.exceptions import CoverageWarning, RolledForwardWarning

    for w in caught:
        if issubclass(w.category, RolledForwardWarning):
            continue
        if issubclass(w.category, CoverageWarning):
            # curator mode only (run_release emits none in author mode): the data's owner
            err.write(f"WARNING (curator, do not publish): {w.message}\n")
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _write_author_notices(notices: Sequence[tuple[type[Warning], str]]) -> None:
    """Author mode: the run's notices to the author (public words), each as a warning."""
    from tabdp.exceptions import warn_each_time

    for category, text in notices:
        warn_each_time(text, category, stacklevel=2)


@contextlib.contextmanager
def _native_stderr_to_confidential(confidential: Path) -> Iterator[TextIO]:
    """Author mode: file descriptor 2 is a confidential log while the run reads the data.

    Native code writes its messages to file descriptor 2 directly, not through Python: a Rust
    panic of Polars prints ``thread ... panicked at ...`` and its message, which may quote a
    value or a count of the data. While the run lasts, descriptor 2 is a temporary file, moved
    to ``stderr.log`` in the confidential folder afterwards (removed if there is no such
    folder); tabdp's own lines go to the terminal through a copy of the original descriptor,
    which this yields as a text stream.
    """
    import os
    import shutil
    import tempfile

    sys.stderr.flush()
    fd, name = tempfile.mkstemp(prefix="tabdp-stderr-", suffix=".log")
    saved = os.dup(2)
    term = open(os.dup(saved), "w", encoding="utf-8", errors="replace",  # noqa: SIM115
                buffering=1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield term
    finally:
        term.flush()
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        term.close()
        log = Path(name)
        try:
            if confidential.is_dir() and log.stat().st_size > 0:
                shutil.move(str(log), str(confidential / "stderr.log"))
        finally:
            log.unlink(missing_ok=True)


def _write_rolled_forward(caught: Sequence[warnings.WarningMessage], err: TextIO) -> None:
    """Curator mode: the clean-up's notices of a killed run's release put in place."""
    from tabdp.exceptions import RolledForwardWarning

    for w in caught:
        if issubclass(w.category, RolledForwardWarning):
            err.write(f"WARNING (curator, do not publish): {w.message}\n")


@contextlib.contextmanager
def _rolled_forward_notices(err: TextIO) -> Iterator[None]:
    """Print the roll-forward notices of the block's clean-up, also when the block fails.

    Other warnings of the block are passed on as they came.
    """
    import warnings

    from tabdp._warnroute import thread_warnings
    from tabdp.exceptions import RolledForwardWarning

    caught: list[warnings.WarningMessage] = []
    try:
        # this thread's warnings only (another thread's pass on as they came)
        with warnings.catch_warnings(), thread_warnings() as caught:
            warnings.simplefilter("always", RolledForwardWarning)
            yield
    finally:
        _write_rolled_forward(caught, err)
        for w in caught:
            if not issubclass(w.category, RolledForwardWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _write_left_out(left_out: dict[str, dict[str, object]], err: TextIO,
                    by: str = "the budget") -> None:
    """Curator mode: what the filters (``by``) left out of each table (empty in author mode)."""
    from tabdp.release.runner import left_out_in_words

    lines = left_out_in_words(left_out, by=by)
    if left_out and not lines:
        what = "Budget" if by == "the budget" else by[4].upper() + by[5:]
        err.write(f"{what} (curator, do not publish): no unit was left out of any table.\n")
    for line in lines:
        err.write(f"WARNING (curator, do not publish): {line}; totals there miss their "
                  "contributions (a bias, downward for counts and for sums of non-negative "
                  "values) and sd/moe do not include it (confidential.json, "
                  "left_out_by_budget).\n")


def _shown(args: argparse.Namespace, text: str) -> str:
    """An error line as the command shows it: without the curator's paths for an author spec."""
    config = getattr(args, "curator_config", None)
    spec = getattr(args, "spec", None)
    # under [policy] author_only every spec is an author's: the spec file is not read again
    # (review rev62b: an empty file in a partition folder parsed as TOML, so its "not found"
    # showed the server path where a missing one showed the command line's: an oracle)
    if config is not None and spec is not None and (config.author_only or _author_spec(spec)
                                                    or _unreadable(spec)):
        # an author spec, or one that does not parse (it may be one): no server path, the
        # spec file shown as the command line names it
        import os

        forms = {os.path.abspath(spec)}
        # review rev64s: under author_only, a spec not read (refused or missing) is named
        # only as load_spec names it: its real path, looked up outside the authors' folder,
        # could be part of that name ('/proc/self/root/x' resolves to '/x', '//x' to '/x'), so
        # the "not found" message showed it twice where a missing file's showed it once
        if not config.author_only or getattr(args, "spec_read", False):
            forms.add(os.path.realpath(spec))
        for form in forms - {str(spec)}:
            text = text.replace(form, str(spec))
            # a message names the path by its repr: a newline, tab or backslash in it is
            # escaped there (review rev64s: 'x\ny.toml' was shown with the server's folder)
            escaped = repr(form)[1:-1]
            if escaped != form:
                text = text.replace(escaped, repr(str(spec))[1:-1])
        return _redact(text, config)
    return text


def _unreadable(spec_path: Path) -> bool:
    """Whether the spec file is not valid TOML (then it may be an author's)."""
    import tomllib

    try:
        tomllib.loads(Path(spec_path).read_text("utf-8"))
    except (OSError, ValueError):
        return True
    return False


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """Run the ``tabdp`` command line.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).
        stdout: Stream for results (default ``sys.stdout``).
        stderr: Stream for errors and progress (default ``sys.stderr``).

    Called without ``argv`` (as the ``tabdp`` program, reading ``sys.argv``), ``run`` and
    ``compare`` also tell glibc's allocator to keep freed memory for the rest of the process
    (`tabdp._alloc.keep_freed_memory`; not when a ``MALLOC_*`` tunable or ``GLIBC_TUNABLES``
    is set) and run Polars' streaming engine in batches of 75,000 rows
    (`tabdp._alloc.smaller_batches`; not when ``POLARS_IDEAL_MORSEL_SIZE`` is set); called
    with ``argv``, the caller's process gets only what any release in it gets
    (glibc's dynamic ``mmap`` threshold raised to its ceiling once, `tabdp._alloc.warm_heap`).

    Returns:
        The exit code (see the module docstring).

    Example:
        >>> import io
        >>> main(["validate", "no-such-spec.toml"], stderr=io.StringIO())
        2
    """
    # a reader that stops early (`tabdp run spec | head -1`) ends the printing, nothing else
    out = cast("TextIO", _ReaderMayLeave(stdout or sys.stdout))
    err = cast("TextIO", _ReaderMayLeave(stderr or sys.stderr))
    try:
        return _main(argv, out, err)
    finally:
        out.flush()  # a buffered stdout meets its closed pipe here, not at the exit's flush
        err.flush()


def _main(argv: Sequence[str] | None, out: TextIO, err: TextIO) -> int:
    """`main` once its streams are set."""
    parser = _parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as e:  # argparse: usage errors exit 2, --help/--version exit 0
        return int(e.code) if isinstance(e.code, int) else EXIT_USAGE
    if argv is None and args.command in ("run", "compare"):
        # the program itself (not a caller's process): a one-shot run keeps freed memory
        from tabdp._alloc import keep_freed_memory, smaller_batches

        keep_freed_memory()
        smaller_batches()
    try:
        if args.command == "validate":
            return _cmd_validate(args, out)
        if args.command == "plan":
            return _cmd_plan(args, out, err)
        if args.command == "run":
            return _cmd_run(args, out, err, args.spec, args.overwrite)
        if args.command == "compare":
            return _cmd_compare(args, out, err)
        if args.command == "ledger":
            return _cmd_ledger(args, out, err)
        if args.command == "demo":
            # review R16: --out names a server folder, says whether it exists and writes
            # there
            _refuse_under_author_only(args, "tabdp demo", "it writes to a folder named on "
                                      "the server (--out) and tells whether it is in use")
            if args.out is None:
                args.out = Path.cwd() / "tabdp-demo"
            # review r51: the demo replaces only a folder it made itself (its marker file)
            _claim_demo_folder(args.out)
            return _cmd_run(args, out, err, _example_spec(), True)
        raise AssertionError(args.command)  # pragma: no cover
    except KeyboardInterrupt:
        err.write("tabdp: interrupted; nothing was written.\n")
        return 130
    except TabdpError as e:
        from tabdp.release.runner import DataDependentFailure

        code = exit_code(e)
        if isinstance(e, DataDependentFailure):
            # the fixed, generic message (author mode: the confidential folder is named
            # under the curator's output root, never by its server path)
            err.write(_shown(args, f"tabdp {args.command}: {e}\n"))
            if e.ledger_release is not None:  # curator mode only (run_release)
                err.write(f"WARNING (curator, do not publish): the lifetime ledger was charged "
                          f"for this run as release {e.ledger_release} of its series although "
                          "nothing was published (the run failed after its commit; the chain "
                          "head is in failure.json). A rerun is charged again.\n")
            return code
        kind = {EXIT_USAGE: "spec/usage error", EXIT_DATA: "data error"}.get(
            code, "internal error")
        err.write(_shown(args, f"tabdp {args.command}: {kind}: {e}\n"))
        if code == EXIT_INTERNAL:
            err.write(_shown(args, traceback.format_exc()))
        return code
    except OSError as e:
        # before any data is read (later failures are DataDependentFailure): the file system
        # refused a path of the spec or the command line, not a bug
        where = f" {e.filename!r}" if getattr(e, "filename", None) else ""
        err.write(_shown(args, f"tabdp {args.command}: spec/usage error: cannot use the "
                               f"path{where}: {e.strerror or e}. Nothing was written.\nHint: "
                               "check the spec's [output] folders (or --out) and input paths: "
                               "they must be on a writable, ordinary file system.\n"))
        return EXIT_USAGE
    except Exception as e:  # noqa: BLE001 - every other failure is a bug: exit 70
        # author mode: the message and the traceback without the curator's server paths
        # (an exception's text or a frame's file may name a dataset, the output root or the
        # configuration; the traceback's lines of tabdp's own code stay, for the bug report)
        err.write(_shown(args, f"tabdp {args.command}: internal error: {type(e).__name__}: "
                               f"{e}\nThis is a bug in tabdp; nothing was written. Please "
                               "report it with this traceback:\n" + traceback.format_exc()))
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
