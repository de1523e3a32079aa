"""A lifetime ledger's state recomputed from its history (``tabdp ledger verify``).

A ledger stores two things per unit (see `tabdp.privacy.lifetime`): ``state/``, the lifetime
totals the filter reads (rewritten by each release, older versions vacuumed), and
``history/``, append-only, one row per release and unit charged with that release's totals
(its ``release`` column is the chain entry's number). Each chain entry pins its history files
by name, size and hash, so the history is as tamper-evident as the chain: a unit's lifetime
totals are implied by it. `check_state` recomputes them (sums rounded up with
`tabdp._numeric.add_up`, in release order; ``size`` and ``size@<currency>`` as maxima) and
refuses a state that is not what the history implies, which the byte checks alone accept when
whoever rewrote the state also rewrote its hash in the chain's last entry and the anchor.

The two sums are rounded at different places, so they may differ by a few units in the last
place: a run adds each query's charge to the lifetime total (the double the filter compared
with the budget), while its history row holds the run's total of those charges. Both are at
least the exact sum of the charges and at most ``(1 + 2**-51)**n`` times it after ``n``
additions; a sum column agrees when the two are equal or differ by at most `SUM_TOLERANCE`
relatively (about two million charges of one unit). Maxima agree only when equal.

Example:
    >>> _agree(np.array([1.0, 1.0, np.inf]), np.array([1.0 + 2**-52, 0.5, np.inf]), False
    ...        ).tolist()
    [True, False, True]
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tabdp._numeric import add_up, add_up_into
from tabdp.exceptions import LedgerError

__all__ = ["SUM_TOLERANCE", "check_state"]

#: How far (relatively) a unit's stored lifetime sum may be from the sum its history implies:
#: ``2**-30``, the rounding of about ``2**21`` (two million) rounded-up additions of one unit
#: (each at most ``1 + 2**-51`` times the exact sum; see the module's docstring). A state
#: below the history's sum by more is refused, and so is one above it.
SUM_TOLERANCE = 2.0 ** -30
_KEYS = ("release", "unit")


def _is_max(c: str) -> bool:
    """Whether a ledger column is a maximum (``size``, ``size@<currency>``) or a sum."""
    return c == "size" or c.startswith("size@")


def _agree(stored: np.ndarray, summed: np.ndarray, is_max: bool) -> np.ndarray:
    """Per unit, whether a stored total is the one recomputed (NaN never agrees)."""
    same = stored == summed
    if is_max:
        return same
    with np.errstate(invalid="ignore", over="ignore"):
        close = (np.isfinite(stored) & np.isfinite(summed)
                 & (np.abs(stored - summed) <= SUM_TOLERANCE * np.maximum(stored, summed)))
    out: np.ndarray = same | close
    return out


def _under(stored: np.ndarray, summed: np.ndarray, is_max: bool) -> np.ndarray:
    """Per unit, whether the stored total is below the recomputed one (or not a number)."""
    with np.errstate(invalid="ignore"):
        out: np.ndarray = ~_agree(stored, summed, is_max) & ~(stored > summed)
    return out


def _refuse(root: Path, what: str) -> LedgerError:
    return LedgerError(
        f"the ledger {root} does not verify: {what}.\nHint: restore the ledger from a verified "
        "copy (check that its `tabdp ledger show` ends with the chain head of the last "
        "release's confidential ledger.json).")


def _positions(keys: pl.Series, query: pl.Series) -> tuple[np.ndarray | None, np.ndarray]:
    """Where each id of ``query`` (unique) is in ``keys`` (sorted, unique): ``(pos, hit)``.

    ``pos`` is ``None`` when ``query`` is ``keys``, id for id; ``pos`` is 0 where not ``hit``.
    """
    from tabdp.privacy.ledger import sorted_search, strictly_increasing

    n = len(query)
    if not len(keys) or not n:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    if len(keys) == n and query.dtype == keys.dtype and query.equals(keys):
        return None, np.ones(n, dtype=bool)
    if keys.dtype == pl.Int64 and query.dtype == pl.Int64:
        q = query.to_numpy()
        if strictly_increasing(q):  # a history file's ids: a merge join
            return sorted_search(keys.to_numpy(), q)
    idx = pl.DataFrame({"unit": keys, "__i": pl.int_range(len(keys), dtype=pl.Int64, eager=True)})
    got = pl.DataFrame({"unit": query}).join(idx, on="unit", how="left",
                                             maintain_order="left")["__i"]
    return got.fill_null(0).to_numpy().astype(np.int64), got.is_not_null().to_numpy()


class _Totals:
    """Per-unit totals of history rows, added release after release (units sorted, unique)."""

    def __init__(self, units: pl.Series) -> None:
        self.units = units
        self.cols: dict[str, np.ndarray] = {}

    def add(self, rows: pl.DataFrame, cols: Sequence[str]) -> np.ndarray | None:
        """Add one history file's rows; returns where its units are (``None``: all, in order)."""
        u = rows["unit"]
        pos, hit = _positions(self.units, u)
        if not hit.all():  # units the state does not hold: inserted once, in id order
            new = u.filter(pl.Series(~hit))
            merged = pl.concat([self.units, new])
            idx = merged.arg_sort().to_numpy()
            k = len(new)
            for c, a in self.cols.items():
                self.cols[c] = np.concatenate([a, np.zeros(k)])[idx]
            self.units = merged.gather(idx)
            pos, hit = _positions(self.units, u)
        n = len(self.units)
        for c in cols:
            x = rows[c].to_numpy()
            acc = self.cols.get(c)
            if acc is None:
                acc = self.cols[c] = np.zeros(n)
            if _is_max(c):
                if pos is None:
                    np.maximum(acc, x, out=acc)
                else:
                    acc[pos] = np.maximum(acc[pos], x)
            elif pos is None:
                add_up_into(acc, x)
            else:
                acc[pos] = add_up(acc[pos], x)
        return pos


def _history_rows(root: Path, data: bytes, rel: str, seq: int,
                  kind: pl.DataType | None) -> tuple[pl.DataFrame, list[str]]:
    """A history file's rows, checked (one release, unit ids unique, losses >= 0)."""
    from tabdp.privacy.ledger import strictly_increasing

    try:
        rows = pl.read_parquet(data)
    except Exception:  # noqa: BLE001 - a file that hashes as recorded but is not Parquet
        raise _refuse(root, f"its history file {rel} (release #{seq}) is not a readable "
                      "Parquet file") from None
    if not set(_KEYS) <= set(rows.columns):
        raise _refuse(root, f"its history file {rel} (release #{seq}) has no release or unit "
                      "column")
    if rows["release"].null_count() or bool((rows["release"] != seq).any()):
        raise _refuse(root, f"its history file {rel}, which release #{seq} lists, holds rows of "
                      "another release")
    u = rows["unit"]
    if kind is not None and u.dtype != kind:
        raise _refuse(root, f"its history file {rel} (release #{seq}) keys units by {u.dtype} "
                      f"ids, the state by {kind}")
    if u.null_count() or not (
            (u.dtype == pl.Int64 and strictly_increasing(u.to_numpy()))
            or u.n_unique() == len(u)):
        raise _refuse(root, f"the history of release #{seq} ({rel}) holds a unit twice or a "
                      "unit without an id")
    cols = [c for c in rows.columns if c not in _KEYS]
    fixed = []
    for c in cols:
        col = rows[c]
        if not col.dtype.is_numeric():
            raise _refuse(root, f"the history of release #{seq} ({rel}) has a column {c!r} "
                          "that is not a number")
        if col.dtype != pl.Float64:
            col = col.cast(pl.Float64)
        if col.null_count():  # a column written later: nothing charged
            col = col.fill_null(0.0)
        # numpy's minimum is NaN where a value is (Polars' skips NaN)
        if len(col) and not float(np.min(col.to_numpy())) >= 0.0:  # negative, or NaN
            raise _refuse(root, f"the history of release #{seq} ({rel}) holds a negative or "
                          f"not-a-number loss in {c!r}")
        fixed.append(col)
    return rows.select(_KEYS).with_columns(fixed), cols


def _state_units(root: Path, files: Sequence[bytes]) -> tuple[pl.Series | None, Any]:
    """The state's unit ids (sorted) and the order that sorts them (``None``: already)."""
    if not files:
        return None, None
    try:
        parts = [pl.read_parquet(io.BytesIO(b), columns=["unit"])["unit"] for b in files]
    except Exception:  # noqa: BLE001 - not Parquet, or no unit column
        raise _refuse(root, "its state is not a readable table of units") from None
    units = pl.concat(parts) if len(parts) > 1 else parts[0]
    if units.null_count() or units.n_unique() != len(units):
        raise _refuse(root, "its state holds a unit twice or a unit without an id")
    if units.is_sorted():
        return units, None
    order = units.arg_sort()
    return units.gather(order), order


def _state_column(files: Sequence[bytes], c: str, order: Any) -> np.ndarray:
    """One column of the state, sorted by unit (NaN where a file lacks it or holds a null).

    The filter reads a null of the state as NaN (never below a budget): it agrees with no sum.
    """
    parts = []
    for b in files:
        schema = pl.read_parquet_schema(io.BytesIO(b))
        if c in schema:
            parts.append(pl.read_parquet(io.BytesIO(b), columns=[c])[c].cast(pl.Float64))
        else:
            n = pl.read_parquet(io.BytesIO(b), columns=["unit"]).height
            parts.append(pl.Series(c, [None] * n, dtype=pl.Float64))
    col = pl.concat(parts) if len(parts) > 1 else parts[0]
    if order is not None:
        col = col.gather(order)
    return col.fill_null(math.nan).to_numpy()


def _history_files(entries: Sequence[Mapping[str, Any]]) -> list[tuple[int, list[Any]]]:
    """``(release, [path, size, digest])`` of every history file, in chain order, once each."""
    seen: set[str] = set()
    out = []
    for e in entries:
        for f in (e.get("history") or {}).get("files", []):
            if f[0] not in seen:
                seen.add(f[0])
                out.append((int(e["seq"]), f))
    return out


def check_state(root: Path, entries: Sequence[Mapping[str, Any]],
                state_files: Sequence[bytes], read: Callable[[list[Any]], bytes]) -> None:
    """Refuse a ledger whose state is not the per-unit sum of its releases' history.

    Every history file is read once: hashed (against its chain entry, as `verify_ledger`
    does) and parsed from the same bytes, then added to the totals (release order). Memory:
    the state's bytes, one history file and one array per column and unit; time: one pass
    over the history (see docs/performance.md).

    Args:
        root: The ledger folder.
        entries: Its verified chain.
        state_files: The bytes of the state's files (hashed against the chain's head).
        read: The bytes of a history file given its chain record ``[path, size, digest]``,
            refused (`LedgerError`) unless they match it (`verify_ledger` reads and hashes).

    Raises:
        LedgerError: The state (or a history file) is not what the chain implies: the message
            gives the number of units that disagree, the columns, and the first release whose
            losses the state does not count; never a unit id or a loss.

    Example:
        >>> import tempfile, pathlib
        >>> from tabdp.privacy.lifetime import Ledger
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
        >>> led = Ledger.create(p, series="s", lifetime_budget=1.0)
        >>> check_state(p, led.entries, [], read=lambda f: b"")  # no release: nothing to compare
    """
    files = _history_files(entries)
    units, order = _state_units(root, state_files)
    kind = None if units is None else units.dtype
    tot = None if units is None else _Totals(units)
    for seq, f in files:
        data = read(f)
        rows, cols = _history_rows(root, data, f[0], seq, kind)
        del data
        if tot is None:  # no state at all: every unit of the history disagrees
            kind = rows["unit"].dtype
            tot = _Totals(rows["unit"].head(0))
        tot.add(rows, cols)
    if tot is None:
        return
    n = len(tot.units)
    if units is None:
        spos: np.ndarray | None = np.zeros(0, dtype=np.int64)
    else:
        spos, _ = _positions(tot.units, units)  # every state unit is in tot.units
    names = {c for b in state_files for c in pl.read_parquet_schema(io.BytesIO(b))}
    names.discard("unit")
    under = np.zeros(n, dtype=bool)
    bad = np.zeros(n, dtype=bool)
    cols_bad: list[str] = []
    stored: dict[str, np.ndarray] = {}
    for c in sorted(names | set(tot.cols)):
        summed = tot.cols.get(c)
        if summed is None:
            summed = np.zeros(n)
        col = np.zeros(n)
        if c in names:
            v = _state_column(state_files, c, order)
            if spos is None:
                col = v
            else:
                col[spos] = v
        ok = _agree(col, summed, _is_max(c))
        if not ok.all():
            cols_bad.append(c)
            bad |= ~ok
            low = _under(col, summed, _is_max(c))
            under |= low
            if low.any():
                stored[c] = col
    if not bad.any():
        return
    first = None
    if under.any():
        first = _first_divergence(root, files, tot.units.filter(pl.Series(under)),
                                  {c: v[under] for c, v in stored.items()}, kind, read)
    head = next((e for e in reversed(entries) if e.get("state") is not None), entries[-1])
    n_under, n_over = int(under.sum()), int((bad & ~under).sum())
    what = (f"its state (each unit's lifetime totals, as release #{head['seq']} wrote them) "
            f"is not what its releases' history adds up to: {n_under + n_over} unit(s) "
            f"disagree, {n_under} below what their releases add up to (or not a number) "
            f"and {n_over} above it, in {', '.join(repr(c) for c in cols_bad)}")
    if first is not None:
        e = entries[first]
        name = e.get("release", e.get("label"))
        what += (f"; the first release whose losses the state does not count is #{first}"
                 + ("" if name is None else f" ({name!r})"))
    raise LedgerError(
        f"the ledger {root} does not verify: {what}. Its bytes match the chain, so the state "
        "was rewritten together with its hash in the chain entry that records it and the "
        "anchor (or written by something other than tabdp); a lifetime loss below its "
        "releases' sum, or a size above their largest, would let a unit pass its lifetime "
        "budget.\nHint: restore the ledger from a verified "
        "copy (check that its `tabdp ledger show` ends with the chain head of the last "
        "release's confidential ledger.json). The units and their losses are confidential and "
        "not shown here: compare tabdp.Ledger.open(path).state() with its .history().")


def _first_divergence(root: Path, files: Sequence[tuple[int, list[Any]]], units: pl.Series,
                      stored: Mapping[str, np.ndarray], kind: Any,
                      read: Callable[[list[Any]], bytes]) -> int | None:
    """The first release after which some of ``units``' history exceeds its stored totals.

    A second pass over the history (only when the state is refused), for the units found
    below it; ``stored``: their state's columns that are below, aligned with ``units``.
    """
    tot = _Totals(units)
    for seq, f in files:
        data = read(f)  # hashed again: the bytes compared are the chain's
        rows, cols = _history_rows(root, data, f[0], seq, kind)
        rows = rows.filter(pl.col("unit").is_in(units))
        if not rows.height:
            continue
        pos = tot.add(rows, cols)
        at = slice(None) if pos is None else pos
        for c, v in stored.items():
            if c in tot.cols and _under(v[at], tot.cols[c][at], _is_max(c)).any():
                return seq
    return None
