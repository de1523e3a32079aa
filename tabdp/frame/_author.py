"""Author mode around a release call: data-free refusals as themselves, every later failure generic.

A release runs its data-free checks first (arguments, schema, key set, rules, names), then reads
the data (`tabdp.frame.binding.phase` marks the moment, on every engine). In an
author-mode session (`Session` with ``mode="author"``, which a
`Curator` creates for each `AuthorSession`), `author_call()`
wraps one release so that what its caller sees depends on the data only through the noise:

* a key set read from the data (``KeySet.from_data``) is refused from the argument alone,
  before anything runs;
* an exception raised before the data phase (a data-free refusal) is raised as itself, without
  the frames it was raised from (their variables hold the pinned data: `_without_frames`);
* any failure after it, whatever its kind (an engine error, a Rust panic of Polars, which is a
  ``BaseException``), becomes `DataFailure`: one fixed message, raised outside the
  original handler and ``from None`` (no cause, no context); the details go to the session's
  confidential summary (``author_failures``). ``KeyboardInterrupt`` and ``SystemExit`` pass;
* warnings emitted before the data phase (usability warnings on the arguments) reach the caller;
  warnings emitted while the data is read are dropped (they could depend on it), and so are
  warnings of other threads while the call runs (Python's warning handler is one per process:
  without this, an author's release collected the curator's confidential warnings, or
  another author's, given meanwhile on another thread). The routing is a hook on
  ``warnings._showwarnmsg``, installed once (`tabdp._warnroute.route_warnings`), that no
  ``catch_warnings`` saves or restores: a handler swapped in for the call was put back by
  another thread's overlapping ``catch_warnings`` while the call still ran, and its data-phase
  warnings then reached the process's handler (the terminal).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from tabdp._warnroute import LOCK, RUNNING, push
from tabdp.exceptions import DataFailure, InvalidParameterError
from tabdp.frame import binding
from tabdp.frame.backends import is_frame, pin_frame, pinned_by_curator_only
from tabdp.privacy.session import Session

__all__ = ["author_call", "check_author_keys", "is_author", "bind_frame", "failure_details"]

_T = TypeVar("_T")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the tabdp package



def is_author(session: Any) -> bool:
    """Whether ``session`` is an author-mode `Session`.

    Args:
        session: The ``session=`` argument of a release.

    Returns:
        True for an author-mode session.

    Example:
        >>> is_author(Session(mode="author")), is_author(None)
        (True, False)
    """
    return isinstance(session, Session) and session.mode == "author"


def check_author_keys(session: Any, keys: Any) -> None:
    """Refuse, in author mode, a key set read from the data (from the argument alone).

    Args:
        session: The release's session.
        keys: The release's key set.

    Raises:
        InvalidParameterError: An author-mode session and a key set flagged ``keys_from_data``
            (`from_data()`, or a product with one).

    Example:
        >>> import polars as pl, warnings, tabdp
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     ks = tabdp.KeySet.from_data(pl.DataFrame({"c": ["a"]}), ["c"])
        >>> try:
        ...     check_author_keys(Session(mode="author"), ks)
        ... except ValueError as err:
        ...     print(str(err)[:45])
        this session is in author mode, and this key
    """
    if is_author(session) and bool(getattr(keys, "_from_data", False)):
        raise InvalidParameterError(
            "this session is in author mode, and this key set was read from the data "
            "(KeySet.from_data, keys_from_data=True): its cells would publish which key values "
            "occur in the confidential data, exactly.\nHint: build the key set from public "
            "values, KeySet.from_dict(...) or KeySet.from_frame(...) of a public file.")


def _caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside tabdp, seen from the caller's frame."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_ROOT):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def author_call(session: Any, keys: Any, call: Callable[[], _T]) -> _T:
    """Run one release ``call``; in author mode, with the rules of this module's docstring.

    Args:
        session: The release's ``session=`` argument.
        keys: The release's key set (checked first in author mode).
        call: The release itself.

    Returns:
        What ``call`` returns.

    Raises:
        DataFailure: Author mode: ``call`` failed after it began reading data.

    Example:
        >>> import polars as pl, tabdp
        >>> s = tabdp.Session(mode="author", seed=1)
        >>> def boom() -> None:
        ...     binding.phase(s, "q1_sum", "reading and aggregating the input")
        ...     raise RuntimeError("value SECRET-7 cannot be parsed")
        >>> try:
        ...     author_call(s, None, boom)
        ... except tabdp.DataFailure as err:
        ...     print("SECRET" in str(err), err.__cause__, err.__context__)
        False None None
        >>> s.report().confidential_summary()["author_failures"][0]["error"]
        'RuntimeError: value SECRET-7 cannot be parsed'
    """
    if not is_author(session):
        return call()
    check_author_keys(session, keys)
    state = binding.of(session)
    state.start_release()
    early: BaseException | None = None
    failed: dict[str, str] | None = None
    shown: list[Warning] = []
    # Python's warning handler is one per process (before 3.14), so while this call runs it
    # also receives the warnings of every other thread: the curator's own calls (whose
    # messages hold CONFIDENTIAL counts), another author's release. Only this thread's, given
    # before the data is read, are this call's to show (`tabdp._warnroute`).

    def show(msg: warnings.WarningMessage) -> None:
        if not state.data_read:
            message, category = msg.message, msg.category
            shown.append(message if isinstance(message, Warning) else category(message))
        # else dropped: given while the data is read

    result: Any = None
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # (the filters: process-wide; the routing is not)
        with LOCK:
            RUNNING[0] += 1
        calls = push(show)  # the hook installed once per process (`tabdp._warnroute`)
        try:
            result = call()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as err:  # noqa: BLE001 - Rust panics are BaseExceptions
            if state.data_read:
                failed = failure_details(err, "a release, after it began reading the data")
            else:
                early = err  # a data-free refusal: raised as itself
        finally:
            calls.pop()
            with LOCK:
                RUNNING[0] -= 1
    level = _caller_stacklevel()
    for w in shown:
        warnings.warn(w, stacklevel=level)
    if early is not None:
        raise _without_frames(early)
    if failed is not None:
        session.record_failure(failed)
        # this frame is in the traceback of the DataFailure: a traceback shown with its
        # frames' local variables (IPython's verbose mode, rich, capture_locals) quoted them
        failed = None
        raise DataFailure() from None  # outside the handler: nothing chained
    return result


def _without_frames(err: BaseException) -> BaseException:
    """``err`` and the exceptions chained to it, without their tracebacks (the frames).

    A data-free refusal is raised from deep in a release, by frames whose local variables
    hold the curator's pinned data (a Polars frame, whose ``repr`` prints its first rows, or
    a scan naming server paths). Its message is the author's; those frames are not: a
    traceback shown with its frames' local variables (IPython's verbose mode, ``rich``,
    ``traceback.TracebackException(capture_locals=True)``) printed them. Raised again, the
    refusal's traceback starts at `author_call`.

    Example:
        >>> try:
        ...     raise ValueError("bad argument")
        ... except ValueError as e:
        ...     err = e
        >>> _without_frames(err).__traceback__ is None
        True
    """
    seen: set[int] = set()
    todo: list[BaseException | None] = [err]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        e.__traceback__ = None
        todo += [e.__cause__, e.__context__]
        if isinstance(e, BaseExceptionGroup):
            todo += list(e.exceptions)
    return err


def failure_details(err: BaseException, during: str) -> dict[str, str]:
    """CONFIDENTIAL details of a failure in an author-mode call, for the curator.

    Args:
        err: The exception (any engine's, a Rust panic included).
        during: What the call was doing.

    Returns:
        ``{"during", "error", "traceback"}`` (the error's text may quote the data).

    Example:
        >>> failure_details(ValueError("bad 7"), "reading")["error"]
        'ValueError: bad 7'
    """
    import traceback

    return {"during": during, "error": f"{type(err).__name__}: {err}",
            "traceback": "".join(traceback.format_exception(err))}


def bind_frame(session: Session, native: Any, pin: Callable[[Any], Any] | None = None) -> Any:
    """Author mode: the pinned data of the session's one frame (binding it if first).

    Args:
        session: The release's session.
        native: The frame a release was called on.
        pin: How to pin a frame of another engine (e.g. a Spark checkpoint); pandas and
            Polars frames are pinned by tabdp itself.

    Returns:
        A Polars LazyFrame over the pinned data (author mode), or ``None`` (curator mode:
        releases read the frame they are given).

    Raises:
        InvalidParameterError: Author mode, and ``native`` is not the bound frame object
            (decided by identity, never by the data).
        DataFailure: Author mode, pinning the first frame failed (details in the session's
            confidential summary).

    Example:
        >>> import polars as pl, tabdp
        >>> df = pl.DataFrame({"x": [1.0]})
        >>> s = tabdp.Session(mode="author", data=df)
        >>> bind_frame(s, df).collect().height
        1
    """
    if session.mode != "author":
        return None
    state = binding.of(session)
    if state.bound is None:
        if not is_frame(native):
            return None  # not a frame: the release's own checks refuse it
        if pinned_by_curator_only(native):  # a pandas DataFrame or any subclass of it
            # decided by the frame's type alone, before any data is read: a pandas frame's
            # conversion can fail on one record's value (an object column holding text, a unit
            # id of another type), and here that failure would be the author's to see
            raise InvalidParameterError(
                "this author-mode session has no frame yet, and a pandas DataFrame cannot be "
                "bound inside a release: converting it can fail on the value of one record "
                "(an object column holding text among numbers), and the release would show "
                "that failure.\nHint: the curator pins the frame in their own call, "
                "tabdp.Session(mode='author', data=frame), or registers it with tabdp.Curator "
                "with a declared schema (a frame whose dtypes were inferred from its values, "
                "pandas or Polars, can follow one record).")
        failed = None
        try:  # pinned inside a release: any failure is the generic one
            pinned = pin_frame(native, pin)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as err:  # noqa: BLE001 - Rust panics are BaseExceptions
            failed = failure_details(err, "pinning the session's frame")
        if failed is not None:
            # raised outside the handler: the author's exception chains nothing
            session.record_failure(failed)
            raise DataFailure() from None
        state.bound, state.pinned = native, pinned
    elif native is not state.bound:
        raise InvalidParameterError(
            "this session is in author mode and is bound to one frame, the curator's "
            "(data= or the frame of its first release); a release on any other frame "
            "object (derived, relabelled, filtered or reordered) is refused, whatever its "
            "data.\nHint: release the session's frame (its columns, keys, rules and "
            "mechanisms are yours to choose), or ask the curator for a session on another "
            "frame.")
    return state.pinned
