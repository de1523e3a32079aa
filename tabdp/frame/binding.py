"""What the frame layer keeps about a session: its engine, its ledger's kind, its snapshot.

A [`Session`][tabdp.Session] is the accountant: the privacy unit, the randomness, the budgets,
the ledger of per-record losses, the records and the reports. Which engine its releases run
on, which kind of ledger that engine keeps and the snapshot a later release of the same frame
may reuse are the frame layer's business, decided here from the frames' classes (never their
data) and handed to the session through its one public hook,
[`Session.install_ledger`][tabdp.Session.install_ledger].

* `use_engine`: the first release binds the session to its engine (Polars, or Spark with its
  own ledger); a later release of another engine is refused before any data is read.
* `choose_ledger`: row mode with ``streaming=None``: the first release's input decides the
  ledger (a LazyFrame: streaming, no per-row state; an eager frame: in memory).
* `cached_snapshot` / `keep_snapshot`: the one evaluation of the last frame released, reused
  by a later release of the same frame object with the same grouping (a count after a sum).
  It lives as long as the session (a weak reference to the session keys it).

Example:
    >>> import tabdp
    >>> s = tabdp.Session()
    >>> choose_ledger(s, lazy_input=True)
    >>> s.streaming, type(s.ledger).__name__
    (True, 'ReplayLedger')
"""

from __future__ import annotations

import weakref
from typing import Any

from tabdp.exceptions import InvalidParameterError
from tabdp.privacy.ledger import ReplayLedger

__all__ = ["use_engine", "choose_ledger", "cached_snapshot", "keep_snapshot", "session_engine"]

#: Session -> its one cached snapshot ({key: entry}); an entry dies with its session.
_SNAPSHOTS: weakref.WeakKeyDictionary[Any, dict[Any, dict[str, Any]]] = (
    weakref.WeakKeyDictionary())


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
        session.install_ledger(ledger)
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
        >>> s.streaming, s.streaming_choice
        (False, False)
    """
    if session.streaming_choice is None and not session.records:
        session.install_ledger(ReplayLedger() if lazy_input else session.ledger,
                               streaming=lazy_input)


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
    return _SNAPSHOTS.get(session, {}).get(key)


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
    _SNAPSHOTS[session] = {key: entry}
