"""Exception and warning classes of tabdp.

Every error tabdp raises on purpose derives from [`TabdpError`][tabdp.exceptions.TabdpError].
User-facing subclasses also derive from the matching builtin, so ``except ValueError`` keeps
working. Messages say what is wrong, the value received, what is allowed, and how to fix it
(``Hint:`` line).

Example:
    >>> import tabdp
    >>> try:
    ...     tabdp.mechanisms.Gaussian(sigma=-1.0)
    ... except ValueError as err:
    ...     print(type(err).__name__)
    InvalidParameterError
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

__all__ = [
    "TabdpError",
    "InvalidParameterError",
    "ColumnNotFoundError",
    "DataValidationError",
    "DataFailure",
    "ColumnTypeError",
    "BudgetExceededError",
    "UnsupportedBackendError",
    "CalibrationError",
    "TabdpInternalError",
    "SpecError",
    "LedgerError",
    "LedgerAnchorError",
    "PrivacyWarning",
    "TabdpWarning",
    "UsabilityWarning",
    "CoverageWarning",
    "RolledForwardWarning",
]


class TabdpError(Exception):
    """Base class of every error raised by tabdp.

    Example:
        >>> issubclass(InvalidParameterError, TabdpError)
        True
    """


class InvalidParameterError(TabdpError, ValueError):
    """A parameter (mechanism, key set, budget, option) has an invalid value.

    Example:
        >>> str(InvalidParameterError("sigma must be > 0; got -1."))
        'sigma must be > 0; got -1.'
    """


class ColumnNotFoundError(TabdpError, KeyError):
    """A column named by the caller is not in the frame's schema.

    Example:
        >>> str(ColumnNotFoundError("column 'x' not found"))
        "column 'x' not found"
    """

    def __str__(self) -> str:
        """The message itself (a KeyError would show its repr(), quotes and escapes included)."""
        return str(self.args[0]) if self.args else ""


class ColumnTypeError(TabdpError, TypeError):
    """A column has a dtype that the operation cannot use (e.g. text in a measure).

    Example:
        >>> issubclass(ColumnTypeError, TypeError)
        True
    """


class DataValidationError(TabdpError, ValueError):
    """The data holds values that a strict rule refuses.

    The rules: null or NaN under ``nulls="error"``, ±inf, negative values under
    ``negatives="error"`` (the default), negative unit-cell contributions for a transformation
    mechanism under ``negatives="allow"``, null unit ids.

    Raised only in the curator mode (``Session(mode="curator")``, the default), before any
    noise is drawn and before anything is recorded in a session. Whether it is raised depends
    on the data, so its message names only the columns and the rules involved: the counts and
    any other detail are CONFIDENTIAL and kept in `confidential` (the release workflow
    writes them to its confidential folder only). Query authors who may not see the data use
    ``Session(mode="author")``, where every rule is declared up front and nothing raises on data.

    Attributes:
        confidential: CONFIDENTIAL details (e.g. how many values broke which rule).

    Example:
        >>> e = DataValidationError("column 'x' holds missing values", confidential={"x": 2})
        >>> issubclass(DataValidationError, ValueError), e.confidential
        (True, {'x': 2})
    """

    def __init__(self, message: str = "", *,
                 confidential: dict[str, Any] | None = None) -> None:
        """Keep the public ``message``; ``confidential`` holds the details that must stay hidden."""
        super().__init__(message)
        self.confidential: dict[str, Any] = dict(confidential or {})


class DataFailure(DataValidationError):
    """An author-mode release failed after it began reading the curator's data.

    Whatever the cause (a value a plan cannot convert, an engine error, a Rust panic of Polars),
    the query author sees this one exception with one fixed message: no value, count, column or
    engine text, and no chained cause (it is raised ``from None``, outside the handler of the
    original error). The details stay with the curator, in the session's
    ``confidential_summary()["author_failures"]``. Data-free refusals (bad arguments, a
    missing column, a key set read from the data) are raised as themselves, before any read.

    Example:
        >>> err = DataFailure()
        >>> isinstance(err, ValueError), err.confidential, err.__cause__ is None
        (True, {}, True)
        >>> str(err).split(":")[0]
        'data failure'
    """

    MESSAGE = (
        "data failure: this release stopped after it began reading the curator's data.\n"
        "The cause is confidential: the curator reads it in the session's confidential "
        "summary. Hint: the arguments passed every check made before the data was read; ask "
        "the curator, whose data or engine failed.")

    def __init__(self) -> None:
        """The fixed message (nothing from the data, no details)."""
        super().__init__(self.MESSAGE)


class BudgetExceededError(TabdpError, ValueError):
    """Deprecated: budgets are enforced as an individual filter and never refuse a query.

    Kept so that code catching it keeps importing; tabdp no longer raises it.

    Example:
        >>> issubclass(BudgetExceededError, TabdpError)
        True
    """


class UnsupportedBackendError(TabdpError, TypeError):
    """The object passed as a frame is not a supported dataframe.

    Example:
        >>> issubclass(UnsupportedBackendError, TypeError)
        True
    """


class CalibrationError(TabdpError, ValueError):
    """Calibration targets cannot be met by the requested mechanism family.

    Example:
        >>> issubclass(CalibrationError, ValueError)
        True
    """


class SpecError(TabdpError, ValueError):
    """A release spec (``release.toml``) is malformed: unknown key, wrong type, bad value.

    Attributes:
        path: Key path of the offending entry, e.g. ``"tables[2].mechanism.sigma"`` (``""`` for
            the whole file).

    Example:
        >>> e = SpecError("tables[0].kind", "must be 'sum' or 'count'; got 'avg'.")
        >>> str(e)
        "tables[0].kind: must be 'sum' or 'count'; got 'avg'."
        >>> e.path
        'tables[0].kind'
    """

    def __init__(self, path: str, message: str) -> None:
        """Prefix ``message`` with the dotted spec ``path`` of the offending key (if any)."""
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path

    def __str__(self) -> str:
        """The message itself, ``path`` prefix included."""
        return str(self.args[0]) if self.args else ""


class LedgerError(TabdpError, ValueError):
    """A lifetime ledger cannot be used: in use by another run, does not verify, wrong series.

    Raised before any data is read. ``busy`` is ``True`` when another run holds the ledger.

    Example:
        >>> LedgerError("in use", busy=True).busy
        True
    """

    def __init__(self, message: str, *, busy: bool = False) -> None:
        """The message, and whether another run holds the ledger."""
        super().__init__(message)
        self.busy = busy


class LedgerAnchorError(LedgerError):
    """A ledger folder does not match the anchor kept next to it: an older or another copy.

    The anchor (``<parent>/.<name>.head.json``) records the series and the chain head of the
    ledger's last commit. An intact ledger whose chain is shorter than the anchor's, does not
    hold the anchor's head, or belongs to another series (an earlier copy of the whole folder
    put back, or another series' ledger in its place) is refused before any data is read.

    Example:
        >>> issubclass(LedgerAnchorError, LedgerError)
        True
    """


class TabdpInternalError(TabdpError, AssertionError):
    """An internal invariant failed: a bug in tabdp.

    Example:
        >>> "bug" in str(TabdpInternalError("x"))
        True
    """

    def __str__(self) -> str:
        """The message followed by the request to report the bug."""
        base = str(self.args[0]) if self.args else ""
        return f"{base}\nThis is probably a bug in tabdp; please report it with the traceback."


class PrivacyWarning(UserWarning):
    """Warns about a setting that weakens privacy (e.g. keys taken from the data).

    Example:
        >>> issubclass(PrivacyWarning, UserWarning)
        True
    """


def warn_each_time(message: str, category: type[Warning], stacklevel: int = 1) -> None:
    """``warnings.warn`` for a notice that must be shown at each occurrence.

    Under Python's default filter (action ``"default"``) ``warnings.warn`` shows a message
    once per text and line of code: a second identical notice from the same line (a ledger's
    anchor written again after it went missing again, opened from one place of a long-lived
    process) would be silently dropped. This warns with ``warnings.warn_explicit`` at the same
    place ``warnings.warn(message, category, stacklevel=stacklevel)`` would name, without the
    per-module registry: each notice is shown unless a filter says otherwise (``"ignore"``,
    ``"once"``, ``"error"`` are obeyed).

    Args:
        message: The notice's text.
        category: Its warning class.
        stacklevel: As ``warnings.warn``'s (1: the line calling this function).

    Example:
        >>> with warnings.catch_warnings(record=True) as got:
        ...     warnings.simplefilter("default")
        ...     for _ in range(2):
        ...         warn_each_time("the anchor was written", PrivacyWarning)
        >>> len(got)
        2
    """
    try:
        frame = sys._getframe(stacklevel)
    except ValueError:  # fewer frames than asked: as warnings.warn, "sys", line 1
        filename, lineno, module = "sys", 1, "sys"
    else:
        filename, lineno = frame.f_code.co_filename, frame.f_lineno
        module = frame.f_globals.get("__name__", "<string>")
    warnings.warn_explicit(message, category, filename, lineno, module=module, registry=None)


class TabdpWarning(UserWarning):
    """Base class of the warnings tabdp emits about a configuration (not about privacy).

    Example:
        >>> issubclass(UsabilityWarning, TabdpWarning)
        True
    """


class UsabilityWarning(TabdpWarning):
    """Warns that a configuration cannot publish usable estimates.

    Raised (as a warning) by [`warn_usability`][tabdp.planning.warn_usability] for a transformation
    whose coefficient-of-variation floor is at or above the flag threshold (every cell would be
    flagged), noise without a finite mean or variance where sd and margins of error are published,
    and calibrated parameters at the edge of their search range.

    Example:
        >>> issubclass(UsabilityWarning, UserWarning)
        True
    """


class CoverageWarning(TabdpWarning):
    """Warns the curator that the input is empty or has rows outside a table's key set.

    Emitted only by a curator-mode release run ([`run_release`][tabdp.release.run_release],
    ``tabdp run``): it depends on the data, so it is for the data's owner, never for a query
    author (author mode emits nothing) and never written to a public file. The message names
    tables, not counts; the counts are in the confidential folder.

    Example:
        >>> issubclass(CoverageWarning, TabdpWarning)
        True
    """


class RolledForwardWarning(TabdpWarning):
    """Tells the curator that a killed run's committed release was put in place (rolled forward).

    A run killed after its commit (with a lifetime ledger: after the ledger was charged) and
    before it renamed its outputs into place left a complete release in its staging folders;
    the next run's clean-up ([`run_release`][tabdp.release.run_release], ``tabdp run``,
    ``tabdp plan``) puts those folders in place and says so with this warning. Emitted only in
    curator mode (it names server folders): an author-mode run says nothing to the author, and
    the curator finds the same record in ``rolled_forward.jsonl`` in the rolled-forward
    confidential folder (written in both modes).

    Attributes:
        folders: The target folders that were put in place.
        at: When (UTC, ISO 8601).
        process: The process id of the killed run.

    Example:
        >>> w = RolledForwardWarning("rolled forward", folders=("out/public",), at="now",
        ...                          process=4242)
        >>> issubclass(RolledForwardWarning, TabdpWarning), w.folders, w.process
        (True, ('out/public',), 4242)
    """

    def __init__(self, message: str, *, folders: tuple[str, ...] = (), at: str = "",
                 process: int | None = None) -> None:
        """Keep the ``message`` and what it is about (``folders``, ``at``, ``process``)."""
        super().__init__(message)
        self.folders = folders
        self.at = at
        self.process = process
