"""Warnings routed by thread: a call collects its own thread's warnings, never another's.

Python's warning handler (``showwarning``, what ``catch_warnings(record=True)`` swaps for a
list) is one per process: a record taken around a call also takes every warning another thread
gives meanwhile (another run, the curator's own call, an engine's worker), and another
thread's overlapping ``catch_warnings`` can put the handler back while the call still runs,
so the call's own warnings then go past its record. The hook here sits on
``warnings._showwarnmsg`` (where every warning that passed the filters goes, Python's ``warn``
and C's ``PyErr_WarnEx`` alike, before ``showwarning``), which no ``catch_warnings`` saves or
restores; it is installed once per process (`route_warnings`). A warning given on a thread
with collectors goes to its innermost one (`thread_warnings`, or an author-mode call's,
`tabdp.frame._author`); of another thread while an author-mode call runs anywhere, dropped
(`RUNNING`); otherwise on as before.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["route_warnings", "thread_warnings", "CALLS", "RUNNING", "LOCK"]

#: Per thread, the warning collectors of the calls it runs (innermost last), in ``.stack``.
CALLS = threading.local()
#: How many author-mode calls run in the process (any thread), under `LOCK`.
RUNNING = [0]
LOCK = threading.Lock()


def route_warnings() -> None:
    """Install, once per process, the hook that routes warnings to their thread's collector.

    Example:
        >>> route_warnings(); getattr(warnings._showwarnmsg, "_tabdp_author", False)
        True
    """
    with LOCK:
        inner = warnings._showwarnmsg  # type: ignore[attr-defined]
        if getattr(inner, "_tabdp_author", False):
            return

        def routed(msg: Any) -> None:
            calls = getattr(CALLS, "stack", None)
            if calls:
                calls[-1](msg)
            elif RUNNING[0] == 0:
                inner(msg)
            # else dropped: another thread's, while an author call runs

        routed._tabdp_author = True  # type: ignore[attr-defined]
        warnings._showwarnmsg = routed  # type: ignore[attr-defined]


def push(collector: Callable[[warnings.WarningMessage], None]) -> list[Any]:
    """Put ``collector`` on this thread's stack (the hook installed); returns the stack.

    Args:
        collector: Called with each warning (``warnings.WarningMessage``) this thread gives
            while it is the innermost; pop it from the returned stack when done.

    Returns:
        This thread's stack of collectors.

    Example:
        >>> got = []
        >>> stack = push(got.append)
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("always")
        ...     warnings.warn("mine", UserWarning)
        >>> stack.pop() == got.append, str(got[0].message)
        (True, 'mine')
    """
    route_warnings()
    calls = getattr(CALLS, "stack", None)
    if calls is None:
        calls = CALLS.stack = []
    calls.append(collector)
    return calls


@contextmanager
def thread_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """Collect the warnings this thread gives in the block (other threads' pass on as before).

    Only the filters decide which warnings are given (``catch_warnings`` around the block sets
    them; they are process-wide). A collected warning is not shown: the caller decides.

    Yields:
        The list the block's warnings are appended to (``warnings.WarningMessage``, as
        ``catch_warnings(record=True)`` gives them).

    Example:
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("always")
        ...     with thread_warnings() as got:
        ...         warnings.warn("mine", UserWarning)
        >>> [str(w.message) for w in got]
        ['mine']
    """
    got: list[warnings.WarningMessage] = []
    calls = push(got.append)
    try:
        yield got
    finally:
        calls.pop()
