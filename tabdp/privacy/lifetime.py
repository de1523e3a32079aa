"""The lifetime ledger: per-unit losses that last across runs of a release series.

A yearly or quarterly series publishes the same tables over mostly the same units; a per-record
guarantee must cover every release a unit is in. A [`Ledger`][tabdp.Ledger] is a folder on the
curator's side holding, per unit id, the losses of every past release of the series, and the
series' lifetime budget. A [`Session`][tabdp.Session] opened with ``ledger=`` applies the
lifetime budget as a second individual filter (Feldman and Zrnic, "Individual Privacy Accounting
via a Rényi Filter", 2021, arXiv:2008.11193), over the stored past losses plus this run's, and
commits its losses to the ledger.

Layout (every file 0600, every folder 0700, CONFIDENTIAL; checked on every path, the anchor
included, by every open and ``tabdp ledger verify``: a looser mode, another owner, a link or a
FIFO, socket or device is refused, never tightened nor opened: see `_check_tree`)::

    <ledger>/
      state/     Delta table: one row per unit ever charged, its lifetime totals
                 (rewritten by each release; memory to read it grows with units, not releases)
      history/   Delta table: append-only, one row per (release, unit charged) with its losses
      chain/     00000000.json (genesis), 00000001.json, ...: one entry per release, holding the
                 hash of the previous entry, the spec and public-manifest hashes, the Delta
                 versions and the hash of every data file (BLAKE3 when the blake3
                 package is installed, ``blake3:<hex>``; SHA-256 before, and without it, bare
                 hex: both are verified); an entry is created with
                 put-if-absent (the commit point), so two writers never both commit release n
      lock       held (``flock``) by the process that opened the ledger; released by the kernel
                 when that process ends, even on ``kill -9``
    .<ledger>.head.json   next to the folder (0600): the anchor, the chain's head, rewritten after
                 each commit; an older copy of the folder put back does not hold it and is
                 refused (see `tabdp.privacy._anchor`)

The ledger's totals have the columns of a session's ledger: ``rho``, ``epsilon``, ``size``,
``rho_z``, ``rho_g``, ``eps_a``, ``delta_a`` and, per currency ``c``, ``rho@c`` and ``size@c``
(sizes and ``size@c`` are maxima, the others sums).

The state is implied by the history (each release's per-unit losses, pinned by the chain):
``tabdp ledger verify`` (`verify_ledger` with ``recompute``) adds them up per unit and refuses
a state that is not their sum (`tabdp.privacy._recompute`); an open does not, since that reads
every release's history.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import hashlib
import io
import json
import math
import os
import socket
import stat
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tabdp._numeric import add_up, add_up_into
from tabdp.exceptions import (
    InvalidParameterError,
    LedgerError,
    PrivacyWarning,
    warn_each_time,
)
from tabdp.privacy import _anchor
from tabdp.privacy.budget import Budget
from tabdp.privacy.ledger import sorted_search, strictly_increasing

__all__ = ["Ledger", "LedgerError", "verify_ledger", "ledger_terms", "budget_spec",
           "budget_from_spec", "FORMAT", "release_curve", "series_bound", "history_in_words",
           "currency_limit", "ledger_anchor"]

#: The ledger format written in every chain entry whose data files are hashed with SHA-256
#: (bare hex digests): every ledger before BLAKE3, and one written where ``blake3`` is missing.
FORMAT = "tabdp-ledger/1"
#: The format of an entry with BLAKE3 digests of its data files (``"blake3:<hex>"``); an
#: older tabdp refuses such an entry by its format, never as altered bytes.
FORMAT_BLAKE3 = "tabdp-ledger/2"
_FORMATS = (FORMAT, FORMAT_BLAKE3)
_BLAKE3 = "blake3:"
_GENESIS_PREV = "0" * 64
_SUM_BASE = ("rho", "epsilon", "rho_z", "rho_g", "eps_a", "delta_a")


def _canon(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _entry_hash(entry: Mapping[str, Any]) -> str:
    return hashlib.sha256(_canon({k: v for k, v in entry.items() if k != "hash"})).hexdigest()


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def budget_spec(b: Budget) -> Any:
    """A budget as plain data (what ``Budget(...)`` takes), to store and compare.

    Args:
        b: The budget.

    Returns:
        A number, or ``{"curves": {currency: [[size, rho], ...]}, "total": ...}``.

    Example:
        >>> budget_spec(Budget(2.0))
        2.0
        >>> budget_spec(Budget({1e3: 0.5, 1e7: 10.0}))["curves"]["*"]
        [[1000.0, 0.5], [10000000.0, 10.0]]
    """
    if b.constant is not None:
        return float(b.constant)
    assert b.curves is not None
    return {"curves": {k: [[float(s), float(r)] for s, r in zip(c.sizes, c.limits, strict=True)]
                       for k, c in b.curves.items()}, "total": b.total}


def budget_from_spec(spec: Any) -> Budget:
    """The budget of [`budget_spec`][tabdp.privacy.lifetime.budget_spec].

    Example:
        >>> budget_from_spec({"curves": {"*": [[1.0, 2.0]]}, "total": None})
        Budget({1: 2})
    """
    if isinstance(spec, (int, float)):
        return Budget(float(spec))
    curves = {k: {float(s): float(r) for s, r in pts} for k, pts in spec["curves"].items()}
    return Budget(curves, total=spec.get("total"))


def _deltalake() -> Any:
    """The ``deltalake`` package, or a clear error naming the extra that installs it."""
    try:
        import deltalake
    except ImportError:
        raise InvalidParameterError(
            "a lifetime ledger is stored as Delta tables, which need the deltalake package; "
            "it is not installed.\nHint: pip install 'tabdp[ledger]'.") from None
    return deltalake


_fsync_dir = _anchor.fsync_dir


def _private(path: Path) -> None:
    """Owner-only permissions on ``path`` and everything under it (0700 / 0600)."""
    path.chmod(0o700)
    for root, dirs, files in os.walk(path):
        for name, mode in [*((d, 0o700) for d in dirs), *((f, 0o600) for f in files)]:
            p = os.path.join(root, name)
            if not os.path.islink(p):  # never the target of a link (refused at open anyway)
                os.chmod(p, mode)


@contextlib.contextmanager
def _owner_only_files() -> Iterator[None]:
    """Files and folders created meanwhile are owner-only from the start (umask 077).

    Every write into a ledger (a commit, the vacuum after it, the restore of an interrupted
    run's versions) runs under it: a run killed before the `_private` that follows leaves no
    file that the next open (`_check_tree`) refuses as readable by others. The umask is the
    process's: the ledger writes while nothing else of the run creates files.
    """
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def _blake3() -> Any:
    """The ``blake3`` package's hasher, or ``None`` when it is not installed."""
    try:
        from blake3 import blake3
    except ImportError:
        return None
    return blake3


def _file_hasher() -> Any:
    """A new hasher for a data file written now: BLAKE3 if installed, else SHA-256.

    BLAKE3 (one thread) hashes about 5.4 GB/s on this project's 2-core machine against 1.16
    GB/s for SHA-256 with the CPU's SHA extensions (0.095 against 0.44 CPU-s per 512 MB): at
    10M units a release hashes about 2 GB of state and history (open and commit). Both are
    collision-resistant 256-bit hashes; a file's digest names its algorithm (`_digest`).
    """
    b3 = _blake3()
    return hashlib.sha256() if b3 is None else b3()


def _digest(h: Any) -> str:
    """How a data file's hash is written in a chain entry: ``blake3:<hex>`` or SHA-256 hex."""
    return h.hexdigest() if h.name == "sha256" else _BLAKE3 + h.hexdigest()


def _hasher_for(recorded: Any, root: Path) -> Any:
    """A new hasher of the algorithm ``recorded`` (a digest from a chain entry) was made with.

    A recorded digest that is not text (an altered entry) gets SHA-256, whose hex digest never
    equals it: the caller refuses the file as not matching its chain (`LedgerError`).
    """
    if not isinstance(recorded, str) or not recorded.startswith(_BLAKE3):
        return hashlib.sha256()
    b3 = _blake3()
    if b3 is None:
        raise InvalidParameterError(
            f"the ledger {root} hashes its files with BLAKE3, which needs the blake3 package; "
            "it is not installed, so the ledger cannot be verified here.\nHint: pip install "
            "'tabdp[ledger]'.")
    return b3()


def _once(h: Any) -> Callable[[], Any]:
    """``h`` as the hash constructor `hashlib.file_digest` asks for (called once)."""
    return lambda: h


def _read_hashed(path: Path, recorded: Any, root: Path) -> tuple[bytes, int, str]:
    """The bytes of ``path``, their size and digest (in the algorithm of ``recorded``)."""
    data = path.read_bytes()
    h = _hasher_for(recorded, root)
    h.update(data)
    return data, len(data), _digest(h)


def _unit_kind(dtype: Any) -> str:
    """``"Int64"`` or ``"String"``: how unit ids of ``dtype`` are stored (else refused)."""
    if dtype == pl.UInt64:  # by dtype, never by value: ids >= 2**63 do not fit Int64
        raise InvalidParameterError(
            "a lifetime ledger keys integer unit ids as Int64; the unit column has dtype "
            "UInt64, whose ids may not fit (refused by its type, whatever the values).\n"
            "Hint: cast the unit id column to Int64 (if every id is below 2**63) or to String, "
            "the same type in every run of the series.")
    if dtype.is_integer():
        return "Int64"
    if dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum):
        return "String"
    raise InvalidParameterError(
        f"a lifetime ledger keys units by their id, which must be integer or text; the unit "
        f"column has dtype {dtype}.\nHint: cast the unit id column to Int64 or String before "
        "the release (the same type in every run of the series).")


def _add_up(a: Any, b: Any, out: np.ndarray | None = None) -> np.ndarray:
    """`tabdp._numeric.add_up` with numpy's ``out=`` (written in place)."""
    if out is None:
        return add_up(a, b)
    add_up_into(out, b)
    return out


class _Lock:
    """An exclusive lock on ``<ledger>/lock`` (``flock``), with the owner written in it."""

    def __init__(self, path: Path) -> None:
        import fcntl

        self.path = path
        # never through a link, never a FIFO or a device (lstat-ed first, opened non-blocking:
        # opening a FIFO can block): the lock is taken before the ledger is verified
        fd = _open_regular(path.parent, path, os.O_RDWR | os.O_CREAT, "lock file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            owner = ""
            with contextlib.suppress(OSError, ValueError):
                info = json.loads(os.read(fd, 4096).decode() or "{}")
                owner = (f" (held by process {info.get('pid')} on host {info.get('host')} "
                         f"since {info.get('since')})")
            os.close(fd)
            if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            raise LedgerError(
                f"the ledger {path.parent} is in use by another run{owner}; two runs against "
                "one ledger at once could lose an update, so this run was refused before "
                "reading any data.\nHint: wait for the other run to finish (the lock is "
                "released when its process ends, even if it is killed), then run again.",
                busy=True) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": _now()}).encode())
        self.fd: int | None = fd

    def release(self) -> None:
        import fcntl

        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None


def _not_regular(root: Path, path: Path, kind: str, what: str) -> LedgerError:
    """The refusal of a ledger path that must be a regular file and is ``kind``."""
    fix = ("a run recreates the lock" if what == "lock file" else
           "then restore the ledger from a verified copy")
    return LedgerError(
        f"the ledger {root} does not verify: its {what} {path} is {kind}, not a regular file; "
        "every file of a ledger must be a regular file inside its folder, owner-only. It was "
        "refused before any data was read, and never opened (opening a FIFO or a device can "
        f"block, or act on the device).\nHint: remove it (rm {path}); {fix}.")


def _open_regular(root: Path, path: Path, flags: int, what: str,
                  mode: int = 0o600) -> int:
    """``os.open`` of a ledger file that must be a regular file (`_anchor.open_regular`).

    Raises:
        LedgerError: ``path`` is a symbolic link, a folder, a FIFO, a socket or a device.
        FileNotFoundError: ``path`` is missing and ``flags`` do not create it.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> os.mkfifo(d / "lock")
        >>> _open_regular(d, d / "lock", os.O_RDWR, "lock file")
        Traceback (most recent call last):
        ...
        tabdp.exceptions.LedgerError: the ledger ... is a FIFO (named pipe), not a regular file; ...
    """
    try:
        return _anchor.open_regular(path, flags, mode)
    except _anchor.NotRegularFile as err:
        raise _not_regular(root, path, err.kind, what) from None


def _uid() -> int | None:
    """The effective user id of this process (``None`` where there is none)."""
    geteuid = getattr(os, "geteuid", None)
    return None if geteuid is None else int(geteuid())


def _check_tree(root: Path) -> None:
    """Refuse a ledger folder whose files are not all owner-only regular files and folders.

    Every path under ``root`` (``root`` and its anchor included) is ``lstat``-ed, never opened
    nor followed: a symbolic link, a FIFO, a socket or a device anywhere is refused (its bytes
    could live, or change, elsewhere; opening it could block); so is a file or folder that
    others may read, write or enter (any group or other permission bit: files must be 0600,
    folders 0700, or stricter) or that another user owns. Every such path is named, with the
    fix; nothing is changed (a loosened ledger may have been read: the curator decides).

    Raises:
        LedgerError: The ledger holds a link or a special file, or a path that is not
            owner-only (the message lists them all).

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "ledger"
        >>> Ledger.create(p, series="s", lifetime_budget=1.0).close()
        >>> _check_tree(p)
        >>> (p / "chain").chmod(0o755)
        >>> _check_tree(p)
        Traceback (most recent call last):
        ...
        tabdp.exceptions.LedgerError: the ledger ... owner-only ... chain is drwxr-xr-x (0755)...
    """
    me = _uid()
    odd: list[str] = []
    odd_paths: list[str] = []
    loose: list[str] = []
    foreign: list[str] = []

    def look(path: str, shown: str) -> None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:  # removed meanwhile (a lock-free verify during a vacuum)
            return
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            odd.append(f"{shown} is {_anchor.file_kind(st.st_mode)}")
            odd_paths.append(path)
            return
        if st.st_mode & 0o077:
            loose.append(f"{shown} is {stat.filemode(st.st_mode)} "
                         f"({oct(stat.S_IMODE(st.st_mode))[2:].zfill(4)})")
        if me is not None and st.st_uid != me:
            foreign.append(f"{shown} is owned by uid {st.st_uid}")

    look(str(root), "the ledger folder itself")
    for base, dirs, files in os.walk(root):
        for name in sorted([*dirs, *files]):
            path = os.path.join(base, name)
            look(path, os.path.relpath(path, root))
    anchor = _anchor.anchor_path(root)
    targets = str(root)
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(anchor)
        targets += f" {anchor}"
        if not stat.S_ISLNK(st.st_mode):  # a link: refused when the anchor is read
            look(str(anchor), f"the anchor {anchor}")
    if odd:
        links = any(o.endswith("a symbolic link") for o in odd)
        raise LedgerError(
            f"the ledger {root} does not verify: it holds {len(odd)} "
            f"{'symbolic link(s) or ' if links else ''}path(s) that are not a regular file or "
            f"a folder (paths in the folder relative to it): {'; '.join(odd)}. A ledger holds "
            "only its own regular files and folders, owner-only: a link's bytes could live, or "
            "change, elsewhere, and opening a FIFO or a device can block, or act on the "
            "device. Refused before any data was read; nothing was opened.\nHint: remove "
            f"{'it' if len(odd) == 1 else 'them'} (rm {' '.join(odd_paths)}); if a file of the "
            "ledger was replaced, restore the ledger from a verified copy.")
    if loose or foreign:
        parts = []
        if loose:
            parts.append(f"{len(loose)} path(s) can be read, written or entered by others "
                         f"(group or other permission bits): {'; '.join(loose)}")
        if foreign:
            parts.append(f"{len(foreign)} path(s) are not owned by this process's user "
                         f"(uid {me}): {'; '.join(foreign)}")
        fixes = []
        if foreign:
            fixes.append(f"run as the ledger's owner, or have an administrator give them "
                         f"back (chown -R {me} {targets})")
        if loose:
            fixes.append(f"check who could have read them, then chmod -R go-rwx {targets}")
        raise LedgerError(
            f"the ledger {root} is not owner-only (paths in the folder relative to it): "
            f"{'; and '.join(parts)}. A ledger holds confidential per-unit losses: every file "
            "must be 0600 and every folder 0700 (or stricter), owned by the curator running "
            "tabdp. Refused before any data was read; nothing was changed.\nHint: "
            f"{'; '.join(fixes)}.")


def _read_chain(root: Path) -> list[dict[str, Any]]:
    """The chain entries, checked: names, sequence, hashes, links, one series (else refused)."""
    chain = root / "chain"
    if not chain.is_dir():
        raise LedgerError(f"{root} is not a tabdp ledger: it has no chain/ folder.\nHint: "
                          "give the folder created by tabdp.Ledger.open, or a new path to "
                          "start a series.")
    names = sorted(p.name for p in chain.iterdir() if not p.name.startswith("."))
    entries: list[dict[str, Any]] = []
    for i, name in enumerate(names):
        if name != f"{i:08d}.json":
            raise LedgerError(
                f"the ledger {root} does not verify: chain entry {i} should be {i:08d}.json but "
                f"the chain holds {name!r} there (an entry was deleted, renamed or added).\n"
                "Hint: restore the ledger from a verified copy; `tabdp ledger verify` shows "
                "the chain.")
        raw = (chain / name).read_bytes()
        try:
            entry = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise LedgerError(
                f"the ledger {root} does not verify: chain entry {name} is not valid JSON "
                "(truncated or altered).\nHint: restore the ledger from a verified copy.") \
                from None
        if not isinstance(entry, dict) or entry.get("format") not in _FORMATS:
            raise LedgerError(
                f"the ledger {root} does not verify: chain entry {name} is not a "
                f"{' or '.join(_FORMATS)} entry.\nHint: restore the ledger from a verified "
                "copy, or open it with the tabdp version that wrote it.")
        if entry.get("hash") != _entry_hash(entry):
            raise LedgerError(
                f"the ledger {root} does not verify: chain entry {name}'s content does not "
                "match its hash (the entry was altered).\nHint: restore the ledger from a "
                "verified copy.")
        if not all(_part_ok(entry.get(part)) for part in ("state", "history")):
            raise LedgerError(
                f"the ledger {root} does not verify: chain entry {name} does not list its "
                "state or history files as a ledger does (the entry was altered).\nHint: "
                "restore the ledger from a verified copy.")
        bad = _check_public_fields(entry)
        if bad is not None:
            raise LedgerError(
                f"the ledger {root} does not verify: chain entry {name}: {bad}; a release's "
                "public curve is written by tabdp itself and states the series' lifetime "
                "bound.\nHint: restore the ledger from a verified copy.")
        prev = entries[-1]["hash"] if entries else _GENESIS_PREV
        if entry.get("seq") != i or entry.get("prev") != prev:
            raise LedgerError(
                f"the ledger {root} does not verify: chain entry {name} does not follow entry "
                f"{i - 1} (releases reordered, deleted or taken from another ledger).\nHint: "
                "restore the ledger from a verified copy.")
        if entries and entry.get("series_id") != entries[0]["series_id"]:
            raise LedgerError(
                f"the ledger {root} does not verify: chain entry {name} belongs to another "
                "release series.\nHint: restore the ledger from a verified copy.")
        entries.append(entry)
    if not entries:
        raise LedgerError(f"the ledger {root} does not verify: its chain is empty.\nHint: "
                          "restore the ledger from a verified copy.")
    return entries


def _part_ok(part: Any) -> bool:
    """Whether a chain entry's ``state`` or ``history`` has the shape the ledger writes.

    ``None`` (nothing written), or ``{"version": int, "files": [[path, size, digest], ...]}``
    with text paths and digests and integer sizes: anything else is an altered entry, refused
    as such (a `LedgerError`) rather than failing on its use.
    """
    if part is None:
        return True
    if not isinstance(part, dict):
        return False
    files, version = part.get("files"), part.get("version")
    return (isinstance(version, int) and not isinstance(version, bool)
            and isinstance(files, list)
            and all(isinstance(f, list) and len(f) == 3 and isinstance(f[0], str)
                    and isinstance(f[1], int) and not isinstance(f[1], bool)
                    and isinstance(f[2], str) for f in files))


# -- public release curves (what each release entry records beside its label) ---------------

#: How a release entry's ``public_curve`` is laid out (PUBLIC: from the spec and the policy
#: curves, never from records): ``total``, the worst-case total ρ of a unit per record size
#: over the release's tables (rows ``{"delta": size, "rho": ...}``, ``rho`` ``None`` where
#: unbounded); ``currencies``, the same per currency (``rows``: the rows per count cell the
#: curve assumes, whatever the size; ``None``: evaluated at the size); ``holds_for``, which
#: units the curves bound (``"every unit"``, or the words of a release whose contributions
#: are bounded per cell only). Entries written before these fields existed (formats 1 and 2
#: alike) lack it, and ``release``: read and verified, their releases bounded by the lifetime
#: budget alone. No new format string: the fields are additive, inside the hashed entry, and a
#: tabdp without them reads such an entry correctly (it verifies the hash over every field and
#: uses none of the new ones), so nothing is misread.
_CURVE_FIELDS = ("total", "currencies", "holds_for")


def _curve_rows(rows: Any, where: str) -> list[dict[str, float | None]]:
    """``rows`` as ``[{"delta": size, "rho": rho or None}]`` sorted by size (else ValueError)."""
    if not isinstance(rows, (list, tuple)):
        raise ValueError(f"{where} must be a list of {{'delta': size, 'rho': rho}} rows; got "
                         f"{type(rows).__name__}")
    out: dict[float, float | None] = {}
    for r in rows:
        if not isinstance(r, Mapping) or "delta" not in r or "rho" not in r:
            raise ValueError(f"{where}: every row needs 'delta' and 'rho'; got {r!r}")
        d, rho = r["delta"], r["rho"]
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not (
                math.isfinite(d) and d >= 0):
            raise ValueError(f"{where}: a size must be a finite number >= 0; got {d!r}")
        if rho is not None and (isinstance(rho, bool) or not isinstance(rho, (int, float))
                                or math.isnan(rho) or rho < 0):
            raise ValueError(f"{where}: rho must be a number >= 0 or None (unbounded); got "
                             f"{rho!r}")
        if float(d) in out:
            raise ValueError(f"{where}: the size {d!r} appears twice")
        out[float(d)] = None if rho is None or math.isinf(rho) else float(rho)
    return [{"delta": d, "rho": out[d]} for d in sorted(out)]


def _checked_curve(curve: Any) -> dict[str, Any]:
    """A release's public curve in its recorded form (see `_CURVE_FIELDS`), else ValueError."""
    if not isinstance(curve, Mapping) or set(curve) - set(_CURVE_FIELDS) or "total" not in curve:
        raise ValueError(f"a release's public curve is a mapping with the keys "
                         f"{list(_CURVE_FIELDS)} ('total' required); got "
                         f"{sorted(curve) if isinstance(curve, Mapping) else type(curve).__name__}")
    total = _curve_rows(curve["total"], "public_curve['total']")
    currencies: dict[str, Any] = {}
    raw = curve.get("currencies") or {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"public_curve['currencies'] must map currency -> curve; got "
                         f"{type(raw).__name__}")
    for c, part in raw.items():
        if not isinstance(c, str) or not isinstance(part, Mapping) or "curve" not in part:
            raise ValueError(f"public_curve['currencies'][{c!r}] must be {{'rows': ..., "
                             f"'curve': [...]}}; got {part!r}")
        rows = part.get("rows")
        if rows is not None and (isinstance(rows, bool) or not isinstance(rows, (int, float))
                                 or not (math.isfinite(rows) and rows > 0)):
            raise ValueError(f"public_curve['currencies'][{c!r}]['rows'] must be a number > 0 "
                             f"or None; got {rows!r}")
        currencies[c] = {"rows": None if rows is None else float(rows),
                         "curve": _curve_rows(part["curve"], f"public_curve[{c!r}]")}
    holds = curve.get("holds_for", "every unit")
    if not isinstance(holds, str):
        raise ValueError(f"public_curve['holds_for'] must be text; got {holds!r}")
    return {"total": total, "currencies": currencies, "holds_for": holds}


def _check_public_fields(entry: Mapping[str, Any]) -> str | None:
    """What is wrong with an entry's ``release`` / ``public_curve`` (``None``: nothing)."""
    name = entry.get("release")
    if name is not None and not isinstance(name, str):
        return f"its release name is not text ({name!r})"
    curve = entry.get("public_curve")
    if curve is None:
        return None
    try:
        if _checked_curve(curve) != curve:
            return "its public curve is not in its recorded form (unsorted or not plain floats)"
    except ValueError as err:
        return f"its public curve is malformed ({err})"
    return None


def release_curve(total: Any, currencies: Mapping[str, Any] | None = None,
                  holds_for: str = "every unit") -> dict[str, Any]:
    """PUBLIC: a release's worst-case curves, as its ledger entry records them.

    Args:
        total: The release's total policy curve: rows ``{"delta": size, "rho": ...}`` (a
            unit's worst-case ρ in the release at that record size; other keys are dropped).
        currencies: The same per currency: ``{currency: {"rows": r, "curve": rows}}``
            (``rows``: the rows per count cell the curve assumes, ``None``: at the size);
            ``None``: not known (a curve lifetime budget then bounds the release by the
            budget alone).
        holds_for: Which units the curves bound (``"every unit"``, or words saying which).

    Returns:
        ``{"total", "currencies", "holds_for"}`` with plain floats, sorted by size.

    Raises:
        InvalidParameterError: A malformed curve (the message says which part).

    Example:
        >>> release_curve([{"delta": 1e3, "rho": 0.5, "epsilon": None}])["total"]
        [{'delta': 1000.0, 'rho': 0.5}]
    """
    try:
        return _checked_curve({"total": total, "currencies": dict(currencies or {}),
                               "holds_for": holds_for})
    except ValueError as err:
        raise InvalidParameterError(
            f"release_curve: {err}.\nHint: pass a policy curve as the plan or "
            "Report.total_policy_curve() gives it (rows {'delta': size, 'rho': rho}).") \
            from None


def _rho_at(rows: list[dict[str, Any]], size: float) -> float:
    """A recorded curve's ρ at exactly ``size`` (``inf``: unbounded, or the size not recorded)."""
    for r in rows:
        if r["delta"] == size:
            return math.inf if r["rho"] is None else float(r["rho"])
    return math.inf


def currency_limit(budget: Budget, name: str, part: Mapping[str, Any],
                   size: float) -> tuple[float, float]:
    """PUBLIC: a curve budget's limit for one currency of a recorded curve, and its ρ there.

    The currency is charged at the unit's size, or at the rows a count curve assumes
    (``part["rows"]``); a currency the budget has no curve for is unbounded (``inf``: such a
    release is refused at run time).

    Args:
        budget: A curve lifetime budget.
        name: The currency (a measure, or ``"rows"``).
        part: Its recorded curve (`release_curve`'s ``currencies[name]``).
        size: The unit's record size.

    Returns:
        ``(limit, rho)``: the budget's limit there and the curve's ρ at ``size`` (``inf``
        where not recorded).

    Example:
        >>> part = {"rows": None, "curve": [{"delta": 10.0, "rho": 0.5}]}
        >>> currency_limit(Budget({1: 0.2, 100: 5.0}), "payroll", part, 10.0)
        (2.6, 0.5)
    """
    at = float(size) if part["rows"] is None else float(part["rows"])
    try:
        limit = float(budget.limit([at], name)[0])
    except InvalidParameterError:  # no curve for it: refused at run time
        limit = math.inf
    return limit, _rho_at(part["curve"], float(size))


def _up2(a: float, b: float) -> float:
    """``a + b`` rounded up (never below the exact sum)."""
    if math.isinf(a) or math.isinf(b):
        return math.inf
    return float(add_up(np.array([a]), np.array([b]))[0])


def series_bound(budget: Budget, curves: Sequence[Mapping[str, Any] | None],
                 sizes: Sequence[float]) -> list[dict[str, Any]]:
    """PUBLIC: the most a unit of each size can have lost over releases with these curves.

    At each size: the smaller of the sum of the releases' worst-case ρ there (each sum
    rounded up) and the lifetime budget there: a constant budget bounds a unit's total; a
    curve budget bounds each currency at the unit's size there (the rows a count curve
    assumes), so each currency contributes the smaller of its releases' sum and its limit,
    and ``total`` caps the sum. A release whose curves were not recorded (``None``), or that
    did not record the size, counts as unbounded there: the budget alone bounds it.

    Args:
        budget: The series' lifetime budget.
        curves: Each release's recorded curve (`release_curve`'s form) or ``None``.
        sizes: The record sizes to state.

    Returns:
        Rows ``{"delta", "rho", "bound_by"}``: ``rho`` the bound (``None``: no single number,
        a curve budget without ``total`` over releases of unknown currencies), ``bound_by``
        ``"curves"`` or ``"lifetime budget"``.

    Example:
        >>> c = release_curve([{"delta": 1e3, "rho": 0.5}])
        >>> series_bound(Budget(1.25), [c, c], [1e3])
        [{'delta': 1000.0, 'rho': 1.0, 'bound_by': 'curves'}]
        >>> series_bound(Budget(1.25), [c, c, c], [1e3])[0]["rho"]
        1.25
    """
    out = []
    for s in sizes:
        s = float(s)
        summed = 0.0
        for c in curves:
            summed = _up2(summed, math.inf if c is None else _rho_at(c["total"], s))
        if budget.constant is not None:
            cap = float(budget.constant)
        else:
            cap = math.inf
            if all(c is not None and c["currencies"] for c in curves):
                cap = 0.0
                names = dict.fromkeys(n for c in curves if c for n in c["currencies"])
                for name in names:
                    parts = [c["currencies"][name] for c in curves if c and name in c["currencies"]]
                    got = 0.0
                    for p in parts:
                        got = _up2(got, _rho_at(p["curve"], s))
                    at = max(s if p["rows"] is None else p["rows"] for p in parts)
                    limit, _ = currency_limit(budget, name, {"rows": at, "curve": []}, s)
                    cap = _up2(cap, min(got, limit))
            if budget.total is not None:
                cap = min(cap, float(budget.total))
        x = min(summed, cap)
        out.append({"delta": s, "rho": None if math.isinf(x) else x,
                    "bound_by": "curves" if summed <= cap and math.isfinite(summed)
                    else "lifetime budget"})
    return out


def _spread(sizes: list[float], k: int = 4) -> list[float]:
    """At most ``k`` of ``sizes``, spread over the list (the plan's ``_few``)."""
    s = sorted(sizes)
    if len(s) <= k:
        return s
    return [s[i] for i in sorted({round(j * (len(s) - 1) / (k - 1)) for j in range(k)})]


def _names(names: list[str]) -> str:
    """``'a', 'b' and 'c'`` (at most six names: the first three, an ellipsis, the last two)."""
    if len(names) > 6:
        names = [*names[:3], "…", *names[-2:]]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _size_words(size: float) -> str:
    return f"{size:,.0f}" if size >= 1 and size == round(size) else f"{size:g}"


def history_in_words(series: str, budget: Budget, releases: Sequence[Mapping[str, Any]],
                     unit: str = "unit", *, current: bool = True,
                     sizes: Sequence[float] | None = None
                     ) -> tuple[list[str], list[dict[str, Any]]]:
    """PUBLIC: what a unit of a few sizes (in each release) has lost at most over the releases.

    From the releases' names and recorded public curves and the lifetime budget only (see
    [`series_bound`][tabdp.privacy.lifetime.series_bound]; bounds rounded up): nothing here
    depends on records.

    Args:
        series: The series' name.
        budget: Its lifetime budget.
        releases: In order, ``{"release": name, "curve": recorded curve or None}`` (the
            entries' `Ledger.releases_public`, then this release); a name ``None``: this
            session's releases (the Python API).
        unit: What a unit is called.
        current: Whether the last of ``releases`` is this one (said so).
        sizes: The record sizes to state (``None``: four of the sizes with a positive
            finite ρ of the last recorded curve that has any).

    Returns:
        The sentences, and the rows of `series_bound` they state.

    Example:
        >>> c = release_curve([{"delta": 1e3, "rho": 0.5}])
        >>> rel = [{"release": f"cbp_{y}", "curve": c} for y in (2024, 2025, 2026)]
        >>> words, rows = history_in_words("cbp", Budget(4.0), rel, "establishment")
        >>> words[0]
        "Over the releases 'cbp_2024', 'cbp_2025' and 'cbp_2026' (this one) of series 'cbp', \
an establishment of size 1,000 in each of them has lost at most rho = 1.5 (zCDP)."
    """
    from tabdp.planning import upper_3g

    if not releases:
        return [], []
    shown = [("this session's releases" if r.get("release") is None else repr(r["release"]))
             for r in releases]
    if current and releases[-1].get("release") is not None:
        shown[-1] += " (this one)"
    if shown == ["this session's releases"]:
        head = "Over this session's releases"
    else:
        head = (f"Over the releases {_names(shown)}" if len(shown) <= 6 else
                f"Over the {len(shown)} releases {_names(shown)}")
    head += f" of series {series!r}, "
    curves = [r.get("curve") for r in releases]
    if sizes is None:
        # the last curve that bounds a loss: one of zeros (a commit, or a session, without
        # releases) bounds every size by 0 and names none (review stop 63: the statement
        # fell back to the lifetime budget alone)
        def sized(c: Mapping[str, Any]) -> list[float]:
            return [r["delta"] for r in c.get("total", [])
                    if r["rho"] is not None and r["rho"] > 0]

        last = next((c for c in reversed(curves) if c is not None and sized(c)), None)
        sizes = _spread(sized(last) if last is not None else [])
    a = "an" if unit[:1].lower() in "aeio" else "a"
    rows = series_bound(budget, curves, sizes)
    lines = []
    for r in rows:
        # the curves bound a unit of that size in EVERY release (a unit larger before has
        # lost more: review r71), said so; a unit whose size changed: the sentence below
        what = f"{a} {unit} of size {_size_words(r['delta'])} in each of them"
        if r["rho"] is None:
            lines.append(f"{head}{what} has lost at most the lifetime budget curve at its size "
                         "in each currency it contributes to (zCDP).")
        else:
            lines.append(f"{head}{what} has lost at most rho = {upper_3g(r['rho'])} (zCDP).")
    if not rows:  # no curve recorded at all
        if budget.constant is not None:
            lines.append(f"{head}every {unit} has lost at most rho = "
                         f"{upper_3g(float(budget.constant))} (zCDP): the lifetime budget.")
        else:
            lines.append(f"{head}{a} {unit} has lost at most the lifetime budget curve at its "
                         "size in each currency it contributes to (zCDP).")
    missing = [shown[i] for i, c in enumerate(curves) if c is None]
    if missing:
        lines.append(f"The curves of {_names(missing)} were not recorded (written by an "
                     "earlier tabdp, or not given): their loss is bounded by the lifetime "
                     "budget alone.")
    loose = [shown[i] for i, c in enumerate(curves) if c is not None
             and c["holds_for"] != "every unit"]
    if loose and rows:
        lines.append(f"The curves of {_names(loose)} bound {unit}s contributing to one cell "
                     f"of each table; {a} {unit} in more cells is bounded by the lifetime "
                     "budget alone.")
    if rows:
        cap = (f"rho = {upper_3g(float(budget.constant))}, the lifetime budget"
               if budget.constant is not None else
               "the lifetime budget curve at its largest size in each currency")
        lines.append(f"{a.capitalize()} {unit} whose size changed between those releases "
                     "has lost at most the sum of each release's worst-case rho at its size "
                     f"in that release, and never more than {cap}.")
    if rows and budget.constant is not None:
        lines.append("Each bound is the smaller of the sum of those releases' public "
                     "worst-case rho at that size (their total policy curves, recorded in the "
                     "series' ledger) and the lifetime budget; computed from public curves "
                     "only, rounded up.")
    elif rows:
        lines.append("Each bound is the smaller of the sum of those releases' public "
                     "worst-case rho at that size (their total policy curves, recorded in the "
                     "series' ledger) and the sum over their currencies (each summed measure; "
                     "rows for counts, medians and quantiles; a joint release of several "
                     "measures: their names joined by '+') of the smaller, in each, of those "
                     "releases' worst-case rho in that currency and the lifetime budget "
                     "curve at the size there (the filter holds each currency to its curve "
                     "separately)"
                     + ("" if budget.total is None else
                        ", and never above the budget's total") +
                     "; computed from public curves only, rounded up.")
    return lines, rows


def _uri_path(uri: str) -> str:
    """The local path of a Delta table's file URI (percent-decoded, links resolved).

    delta-rs gives ``file://`` URIs, percent-encoded (a space is ``%20``), with links resolved.

    Example:
        >>> _uri_path("file:///tmp/My%20Ledgers/l/state/part-0.parquet")
        '/tmp/My Ledgers/l/state/part-0.parquet'
    """
    from urllib.parse import unquote

    return os.path.realpath(unquote(uri.removeprefix("file://")))


def _rel_files(table: Path, uris: list[str]) -> set[str]:
    """The table's files as the chain names them: relative to the ledger folder."""
    base = os.path.realpath(table.parent)
    return {os.path.relpath(_uri_path(u), base) for u in uris}


def _ledger_root(path: str | os.PathLike[str]) -> Path:
    """A ledger folder's absolute path, links resolved; a path with ``%`` refused.

    Resolved, so that the anchor is the one next to the real folder whichever path (a link
    to the folder, or through a linked parent) names it.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> (d / "real").mkdir()
        >>> (d / "link").symlink_to(d / "real")
        >>> _ledger_root(d / "link") == _ledger_root(d / "real")
        True
    """
    root = Path(os.path.realpath(Path(path).absolute()))
    bad = sorted({c for c in str(root) if c == "\\" or ord(c) < 32 or ord(c) == 127})
    if bad:
        raise LedgerError(
            f"the ledger path {str(root)!r} holds {', '.join(map(repr, bad))}: the Delta Lake "
            "library tabdp stores the ledger with reads a backslash as a folder separator and "
            "refuses control characters, so the ledger's tables would not be found (a run "
            "would fail after reading the data).\nHint: give the ledger a path without "
            "backslashes or control characters (rename or move the folder, with its anchor).")
    if "%" in str(root):
        raise LedgerError(
            f"the ledger path {root} holds a '%': the Delta Lake library tabdp stores the "
            "ledger with reads it as an escape (\"%20\" as a space) and would not find the "
            "ledger's tables.\nHint: give the ledger a path without '%' (rename or move the "
            "folder, with its anchor).")
    return root


def _delta_files(table: Path, version: int) -> set[str]:
    DeltaTable = _deltalake().DeltaTable

    try:
        dt = DeltaTable(str(table), version=version)
    except Exception as err:  # noqa: BLE001 - delta-rs raises several kinds
        raise LedgerError(
            f"the ledger {table.parent} does not verify: its Delta table {table.name}/ cannot "
            f"be read at version {version} ({type(err).__name__}).\nHint: restore the ledger "
            "from a verified copy.") from None
    return _rel_files(table, dt.file_uris())


def _check_files(root: Path, files: list[list[Any]], what: str,
                 keep: bool = False) -> list[bytes]:
    out = []
    for rel, size, digest in files:
        p = root / rel
        try:
            if keep:
                data, n, h = _read_hashed(p, digest, root)
            else:  # streamed: memory bounded whatever the file's size
                with open(p, "rb") as fh:
                    algo = _hasher_for(digest, root)  # refused here if it cannot be checked
                    h = _digest(hashlib.file_digest(fh, _once(algo)))
                    n = fh.tell()
        except FileNotFoundError:
            raise LedgerError(
                f"the ledger {root} does not verify: a file of its {what} is missing "
                f"({rel}).\nHint: restore the ledger from a verified copy.") from None
        if n != size or h != digest:
            raise LedgerError(
                f"the ledger {root} does not verify: a file of its {what} does not match the "
                f"hash its chain holds ({rel}: {n} bytes, {size} recorded; altered or "
                "truncated).\nHint: restore the ledger from a verified copy.")
        if keep:
            out.append(data)
    return out


def ledger_anchor(path: str | os.PathLike[str]) -> Path:
    """Where the anchor of a ledger folder is (beside it: ``<parent>/.<name>.head.json``).

    Args:
        path: The ledger folder.

    Returns:
        The anchor file's path (it holds the chain's head).

    Example:
        >>> ledger_anchor("/srv/ledgers/cbp").as_posix()
        '/srv/ledgers/.cbp.head.json'
    """
    return _anchor.anchor_path(Path(path))


def ledger_terms(path: str | os.PathLike[str]) -> tuple[str, Any]:
    """PUBLIC terms of a series: its name and lifetime budget, as recorded at its creation.

    Read from the chain's first entry alone, without the lock and without verifying the rest
    (opening the ledger for a release verifies everything and checks these same terms): the
    series and its lifetime budget are public parameters, chosen by the curator, never
    computed from records. A release statement uses them before any run (``tabdp validate``).

    Args:
        path: The ledger folder.

    Returns:
        ``(series, lifetime_budget)``, the budget in the spec form (a number or a curve).

    Raises:
        LedgerError: No ledger there, or its first entry does not parse.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "ledger"
        >>> Ledger.create(p, series="cbp", lifetime_budget=4.0).close()
        >>> ledger_terms(p)
        ('cbp', 4.0)
    """
    first = Path(path) / "chain" / f"{0:08d}.json"
    try:  # never through a link, never a FIFO (it could block: `tabdp validate` reads this)
        with os.fdopen(_open_regular(Path(path), first, os.O_RDONLY, "first chain entry"),
                       "rb") as fh:
            entry = json.loads(fh.read())
        return str(entry["series"]), entry["lifetime_budget"]
    except LedgerError:
        raise
    except (OSError, ValueError, UnicodeDecodeError, KeyError, TypeError) as err:
        raise LedgerError(f"no readable ledger at {path}: its first chain entry is missing or "
                          "does not parse.\nHint: check the path, or `tabdp ledger verify` "
                          "it.") from err


def verify_ledger(path: str | os.PathLike[str], *, series: str | None = None,
                  lock: bool = False, history: bool = True, accept_restore: bool = False,
                  recompute: bool = False, _keep_state: bool = False,
                  _locked: bool = False, _notes: list[str] | None = None,
                  _quiet: bool = False) -> tuple[list[dict[str, Any]], list[bytes]]:
    """Check a ledger: its chain, state and history files, the logs naming them, its anchor.

    First, every path of the folder and its anchor is ``lstat``-ed (nothing opened): a link, a
    FIFO, a socket or a device is refused, and so is a file or folder that is not owner-only
    (a group or other permission bit, or another owner), every such path named with the fix.

    Without ``lock``, read-only and lock-free: Delta versions written after the chain's last
    entry (by a run that was interrupted before it committed) are ignored, as every reader
    ignores them. Last, the chain is compared with the ledger's anchor (the chain head kept
    next to the folder, ``<parent>/.<name>.head.json``): an intact ledger that is an older copy
    (a chain shorter than the anchor's, or not holding its head) or another series' is refused.
    With ``lock``, a missing anchor (a ledger made before anchors, or the anchor deleted) is
    written, with a `PrivacyWarning` to the curator, and one left a release behind by a run
    killed between its commit and the anchor's update is brought up to date.

    Args:
        path: The ledger folder.
        series: The series the ledger must belong to (``None``: any).
        lock: Take the ledger's lock while checking (refused if a run holds it), so that a
            run committing meanwhile cannot make an intact ledger look broken.
        history: Hash every history file (``False``: the newest release's history files are
            hashed, older ones checked by presence and size; the chain and the state, which
            the filter reads, are always hashed, and the Delta logs checked to name exactly the
            files the chain records: their other bytes are not hashed; no decision reads them).
        accept_restore: Accept the folder as it is when it does not match its anchor (the
            curator's deliberate restore of an older copy): the anchor is rewritten to the
            folder's head, with a `PrivacyWarning` saying so. Needs ``lock``.
        recompute: Also recompute every unit's lifetime totals from the history (each
            release's per-unit losses, summed in release order and rounded up like a commit;
            sizes as maxima) and refuse a state that is not what they add up to (within
            `tabdp.privacy._recompute.SUM_TOLERANCE` for sums; see
            `tabdp.privacy._recompute.check_state`), before the anchor is checked. Reads and
            hashes every history file once, whatever ``history``: its cost grows with the
            series' length (``tabdp ledger verify`` does it; an open does not).
        _notes: Internal: the texts of this call's anchor notices (a missing anchor written,
            a restore accepted) are appended here: a caller learns of them from this call
            alone (recording warnings with ``catch_warnings`` is process-wide and would also
            take other threads' warnings).
        _quiet: Internal: the notices are not warned (the caller passes them on itself).

    Returns:
        The chain entries (genesis first) and, internally, the state files' bytes.

    Raises:
        LedgerError: The ledger is not owner-only or holds a link or a special file, or
            does not verify (the message says where; with
            ``recompute``, a state that is not its history's sum: how many units disagree,
            in which columns, and the first release the state does not count).
        LedgerAnchorError: It verifies, but does not match its anchor (an older or another
            copy of the folder).
        InvalidParameterError: ``accept_restore`` without ``lock``.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "ledger"
        >>> Ledger.open(p, series="demo", lifetime_budget=1.0, create=True).close()
        >>> len(verify_ledger(p, series="demo")[0])
        1
        >>> len(verify_ledger(p, series="demo", recompute=True)[0])
        1
    """
    root = _ledger_root(path)
    if not root.is_dir():
        raise LedgerError(f"no ledger at {root}.\nHint: check the path; a new series starts "
                          "with tabdp.Ledger.create(path, series=..., lifetime_budget=...) "
                          "or `tabdp ledger init PATH --series S --lifetime-budget B`.")
    if accept_restore and not (lock or _locked):
        raise InvalidParameterError(
            "verify_ledger(accept_restore=True) rewrites the ledger's anchor, which needs the "
            "ledger's lock; got lock=False.\nHint: pass lock=True.")
    if lock:
        held = _Lock(root / "lock")
        try:
            return verify_ledger(root, series=series, history=history,
                                 accept_restore=accept_restore, recompute=recompute,
                                 _keep_state=_keep_state, _locked=True, _notes=_notes,
                                 _quiet=_quiet)
        finally:
            held.release()
    _check_tree(root)
    entries = _read_chain(root)
    head = entries[-1]
    if series is not None and entries[0].get("series") != series:
        raise LedgerError(
            f"the ledger {root} belongs to the release series {entries[0].get('series')!r}, "
            f"not {series!r}; a ledger from another series would account other units' losses."
            "\nHint: give this series' ledger; to start the series, create its ledger first "
            f"with `tabdp ledger init NEW_PATH --series {series} --lifetime-budget B` (a run "
            "never creates one) and give that path.")
    state: list[bytes] = []
    if head.get("state") is not None:
        st = head["state"]
        if _delta_files(root / "state", st["version"]) != {f[0] for f in st["files"]}:
            raise LedgerError(
                f"the ledger {root} does not verify: the files of its state table at version "
                f"{st['version']} are not those its chain holds (Delta log altered).\nHint: "
                "restore the ledger from a verified copy.")
        state = _check_files(root, st["files"], "state", keep=_keep_state or recompute)
    hist = [e["history"] for e in entries if e.get("history") is not None]
    if hist:
        recorded = {f[0] for h in hist for f in h["files"]}
        if _delta_files(root / "history", hist[-1]["version"]) != recorded:
            raise LedgerError(
                f"the ledger {root} does not verify: the files of its history table are not "
                "those its chain holds (a release's history deleted or added).\nHint: restore "
                "the ledger from a verified copy.")
        for i, h in enumerate(hist):
            if recompute:  # every file hashed below, parsed from the bytes it hashes
                break
            if history or i == len(hist) - 1:  # the newest release's history: always hashed
                _check_files(root, h["files"], "history")
                continue
            for rel, size, _ in h["files"]:
                if not (root / rel).is_file() or (root / rel).stat().st_size != size:
                    raise LedgerError(
                        f"the ledger {root} does not verify: a file of its history is missing "
                        f"or has another size than its chain records ({rel}).\nHint: restore "
                        "the ledger from a verified copy.")
    if recompute:
        from tabdp.privacy._recompute import check_state

        check_state(root, entries, state,
                    read=lambda f: _check_files(root, [f], "history", keep=True)[0])
    if recompute and not _keep_state:
        state = []
    # last: an intact ledger may still be an older (or another) copy of the folder
    status, anchor = _anchor.check_anchor(root, entries, accept_restore=accept_restore)
    if _locked:
        note = _settle_anchor(root, entries, status, anchor, quiet=_quiet)
        if note is not None and _notes is not None:
            _notes.append(note)
    return entries, state


def _settle_anchor(root: Path, entries: list[dict[str, Any]], status: str,
                   anchor: _anchor.Anchor | None, quiet: bool = False) -> str | None:
    """Bring the anchor to the chain's head (the lock held), telling the curator why.

    Returns the notice warned (``None``: none, the anchor up to date or one release behind,
    brought up silently); with ``quiet`` it is returned but not warned.
    """
    if status == _anchor.OK:
        return None
    accepted = None
    if status == _anchor.ACCEPTED:
        accepted = {"at": _now(), "previous": None if anchor is None else {
            "series_id": anchor.series_id, "entries": anchor.entries, "head": anchor.head}}
    _anchor.write_anchor(root, entries, accepted=accepted)
    head = f"{len(entries) - 1} release(s), chain head {entries[-1]['hash'][:16]}…"
    if status == _anchor.MISSING:
        note = (
            f"the ledger {root} had no anchor (the chain head kept next to it, "
            f"{_anchor.anchor_path(root).name}): it was made before anchors existed, or the "
            f"anchor was deleted or not copied with the folder. One was written ({head}); from "
            "now on an older copy of the folder put back is refused. This open could not tell "
            "whether the folder itself is an older copy.\nHint: check that `tabdp ledger show` "
            "ends with the chain head of the series' last release (its confidential "
            "ledger.json); keep the anchor with the ledger when you move or copy it.")
    elif status == _anchor.ACCEPTED:
        was = ("no readable anchor" if anchor is None else
               f"{anchor.releases} release(s), chain head {anchor.head[:16]}…")
        note = (
            f"the ledger {root}: restore accepted; its anchor now records the folder's "
            f"{head} (it recorded {was}). Releases the folder lacks are no longer counted in "
            "any unit's lifetime loss.\nHint: accept a restore only if those releases were "
            "never published.")
    else:  # BEHIND: a run killed between its commit and the anchor's update, brought up
        return None
    if not quiet:
        # each time (the default filter would show an identical notice once per line)
        warn_each_time(note, PrivacyWarning, stacklevel=4)
    return note


class Ledger:
    """A release series' lifetime ledger (CONFIDENTIAL): per-unit losses across runs.

    Open it with [`Ledger.open`][tabdp.Ledger.open] and pass it to
    ``tabdp.Session(unit=..., ledger=ledger)``: the session then leaves out of each query every
    unit whose lifetime loss (the losses stored for past releases, plus this run's) would pass
    the lifetime budget, exactly as the per-run ``budget=`` does within a session, and commits
    its losses to the ledger (after each release, or when the release workflow has written its
    outputs). Units new to the series start at zero.

    Attributes:
        path: The ledger folder.
        series: The series' name (public).
        budget: The lifetime budget (public).
        entries: The chain entries read at open (genesis first).
        read_only: Opened with ``read_only=True``: it filters as an open ledger does, but
            never commits (its charges are dropped at `close`) and its opening wrote nothing.

    Example:
        >>> import tempfile, pathlib, polars as pl, tabdp
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "ledger"
        >>> df = pl.DataFrame({"id": [1, 2], "c": ["a", "b"]})
        >>> keys = tabdp.KeySet.from_dict(c=["a", "b"])
        >>> life = []
        >>> for year in (2024, 2025, 2026):
        ...     with tabdp.Ledger.open(p, series="cbp", lifetime_budget=1.0, create=True) as led:
        ...         s = tabdp.Session(unit="id", seed=year, ledger=led)
        ...         _ = df.dp.count(by=["c"], keys=keys, session=s,
        ...                         mechanism=tabdp.mechanisms.Gaussian(1.0))
        ...         life.append(s.report().per_record["rho_lifetime"].to_list())
        >>> life  # 0.5 a year; in 2026 both would pass 1.0: left out (charged nothing)
        [[0.5, 0.5], [1.0, 1.0], []]
    """

    def __init__(self, root: Path, lock: _Lock, entries: list[dict[str, Any]],
                 state: pl.DataFrame | None, autocommit: bool, read_only: bool = False) -> None:
        """Use [`Ledger.open`][tabdp.Ledger.open]."""
        self.path = root
        self.read_only = read_only
        self._lock: _Lock | None = lock
        self.entries = entries
        self.series: str = entries[0]["series"]
        self.budget: Budget = budget_from_spec(entries[0]["lifetime_budget"])
        self._state = state
        self.autocommit = autocommit
        self.unit_dtype: str | None = entries[-1].get("unit_dtype")
        #: the unit id type of this run's recorded releases (`note_unit_type`, from their
        #: schema): pinned at commit while the series has none, whoever was charged
        self._run_kind: str | None = None
        #: this run's uncommitted charges, in memory (merged into the state once, at commit)
        self._tot = _RunTotals(state)
        #: closing with uncommitted charges warns unless set (`allow_discard`: the release
        #: workflow closes without committing only when nothing was published)
        self._discard_ok = False
        #: the warnings its opening gave (a missing anchor written, a restore accepted), for
        #: the curator: the release workflow lists them in the run's confidential files
        self.open_warnings: list[str] = []
        #: the releases (`tabdp.privacy.session.QueryRecord`) of every session recorded on
        #: this ledger since its last commit, whoever charged: a commit adds every uncommitted
        #: charge, so a session's commit records the public curves of all of them
        #: (`tabdp.Session.commit_ledger`; review rev63l: the committing session's releases
        #: alone understated the public bound when sessions shared an autocommit=False ledger)
        self.pending_releases: list[Any] = []
        #: held by a release from its lifetime filter to its charge (and commit), and by
        #: `commit` and `close` (`one_release`; review rev63e)
        self._turn = threading.RLock()

    # -- opening ------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str], *, series: str | None = None,
             lifetime_budget: float | Mapping[Any, Any] | Budget | None = None,
             create: bool = False, autocommit: bool = True,
             public: tuple[str | os.PathLike[str], ...] = (),
             verify_history: bool = False, accept_restore: bool = False,
             read_only: bool = False, _new: bool = False, _quiet: bool = False,
             _notes: list[str] | None = None) -> Ledger:
        """Open (or create) a lifetime ledger, lock it, verify it, read its state.

        Everything here happens before any data is read: a ledger in use by another run, one
        that is not owner-only (any file or folder, or the anchor, with a group or other
        permission bit or of another owner: every such path named, nothing changed), one that
        holds a link, a FIFO, a socket or a device, one
        that does not verify (bytes, order, chain), one of another series, or an older copy of
        the folder (it does not hold the chain head its anchor records: see
        [`verify_ledger`][tabdp.privacy.lifetime.verify_ledger]) is refused.

        Args:
            path: The ledger folder (created 0700 when new).
            series: The series' name: recorded at creation; on open, the ledger must be of this
                series (``None``: not checked). Required to create a ledger.
            lifetime_budget: Each unit's lifetime limit on ρ: a number, a ``{size: rho}`` curve
                or ``{currency: curve}``, like ``Session(budget=...)``. Required to create a
                ledger; on open it must equal the recorded one (``None``: the recorded one).
            create: Create the ledger if ``path`` does not exist (the first release of a
                series). Off by default: a ledger folder that has vanished (deleted, moved,
                unmounted, a typo in the path) is refused rather than silently restarting
                every unit's lifetime loss at zero. [`create`][tabdp.Ledger.create] starts a
                series explicitly.
            autocommit: Commit each release's losses when it is recorded (the Python API:
                a release's table is in the caller's hands as soon as it returns). The release
                workflow passes ``False`` and commits once its outputs are written.
            public: Folders the ledger must not be in (the release's public output).
            verify_history: The full check at open, as ``tabdp ledger verify`` does it:
                hash every history file and recompute every unit's lifetime totals from it,
                refusing a state that is not their sum (`verify_ledger`'s ``recompute``).
                Off by default: an open hashes the chain and the state (all the filter
                reads; the Delta logs are checked to name the chain's files) and the newest
                release's history, and checks older history
                files by presence and size, so opening costs what the state costs (it grows
                with units), however long the series. A flipped byte inside an older
                release's history (an audit record the filter never reads), or a state
                rewritten together with its hash in the chain and the anchor, is found by
                ``tabdp ledger verify`` or with ``verify_history=True``, whose cost grows
                with the series' length.
            accept_restore: Accept the folder as it is although it does not match its anchor
                (the curator's deliberate restore of an older copy, whose later releases were
                never published): the anchor is rewritten to the folder's chain head, with a
                `PrivacyWarning` saying so (``tabdp ledger accept-restore PATH`` does the same).
            read_only: Read the ledger without changing it (``tabdp compare``'s DP side: what
                a release would leave out, never charged). It is locked and verified as any
                open is (refused in use, not verifying, another series or budget, an older
                copy), but nothing in or next to the folder is written: a missing anchor is
                not written nor one left behind brought up to date, Delta versions of an
                interrupted run are ignored (as every reader does) rather than rolled back,
                and the folder's parent need not be writable. It filters like any open
                ledger; its charges stay in memory and are dropped at `close` (no warning),
                and `commit` is refused. Needs ``autocommit=False``; not with ``create`` or
                ``accept_restore``. A `tabdp.Session` refuses it (its releases would be
                charged nowhere): only ``tabdp compare``, whose DP side is never published,
                releases through one.
            _quiet: Internal: the opening's anchor notices are not warned, only kept in
                `open_warnings` (an author's run passes them on without the ledger's path:
                `tabdp.release.curator_config.dataset_ledger_warnings`).
            _notes: Internal: the opening's anchor notices are also appended here, also when
                the open then fails (a budget that does not match, a rollback or the state
                failing after the anchor was written): with ``_quiet`` the caller passes them
                on itself, and would otherwise lose them with the ledger it never got.

        Returns:
            The open ledger (close it, or use it as a context manager, to release the lock).
            Its ``open_warnings`` holds the texts of this opening's own anchor notices.

        Raises:
            LedgerError: In use, not owner-only (or a link or special file in it), does not
                verify, another series, or a different budget.
            LedgerAnchorError: An older or another copy of the ledger folder (it does not
                match its anchor; ``accept_restore`` accepts it).
            InvalidParameterError: A missing series or budget for a new ledger, or a ledger
                inside a public folder; ``read_only`` with ``create``, ``accept_restore`` or
                ``autocommit``.

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "ledger"
            >>> with Ledger.open(p, series="qcew", lifetime_budget=4.0, create=True) as led:
            ...     led.series, led.releases, oct(p.stat().st_mode & 0o777)
            ('qcew', 0, '0o700')
            >>> with Ledger.open(p, autocommit=False, read_only=True) as led:
            ...     led.read_only, led.releases
            (True, 0)
        """
        if read_only and (create or accept_restore or autocommit):
            raise InvalidParameterError(
                f"Ledger.open(read_only=True) writes nothing; got create={create}, "
                f"accept_restore={accept_restore}, autocommit={autocommit}, which write.\n"
                "Hint: open read-only with autocommit=False and neither create nor "
                "accept_restore.")
        root = _ledger_root(path)
        for pub in public:
            pub_r = Path(pub).resolve()
            led_r = root.resolve()
            if led_r == pub_r or pub_r in led_r.parents or led_r in pub_r.parents:
                raise InvalidParameterError(
                    f"the lifetime ledger {root} is inside (or holds) the public output folder "
                    f"{pub}; the ledger is confidential (per-unit losses reveal values).\nHint: "
                    "keep the ledger next to the confidential outputs, outside the public "
                    "folder.")
        if not root.exists():
            if create and not _new:
                cls._refuse_vanished(root)
            if not create:
                raise LedgerError(
                    f"no ledger at {root}. A series' ledger is never created implicitly: a "
                    "missing folder would restart every unit's lifetime loss at zero.\nHint: "
                    "if the series already has releases, restore the ledger folder (from the "
                    "backup whose chain head matches the last run's confidential ledger.json); "
                    "if this is the series' first release, create it with "
                    "tabdp.Ledger.create(path, series=..., lifetime_budget=...) or "
                    "`tabdp ledger init PATH --series S --lifetime-budget X`.")
            cls._create(root, series, lifetime_budget)
        elif not (root / "chain").is_dir():
            raise LedgerError(
                f"{root} exists but is not a tabdp ledger (no chain/ folder).\nHint: give a "
                "ledger folder, or a path that does not exist yet to start a series.")
        if root.stat().st_mode & 0o077:
            raise LedgerError(
                f"the ledger {root} is readable or writable by others (mode "
                f"{oct(root.stat().st_mode & 0o777)}); a ledger holds confidential per-unit "
                f"losses and must be owner-only.\nHint: chmod -R go-rwx {root}.")
        lock = _Lock(root / "lock")
        # this open's own anchor notices, kept for the run's confidential files (never
        # recorded with catch_warnings: process-wide, it would take other threads' warnings)
        notes: list[str] = []
        try:
            # read-only: verified under the lock, but its anchor left as it is
            entries, state_bytes = verify_ledger(
                root, series=series, history=verify_history, accept_restore=accept_restore,
                recompute=verify_history, _keep_state=True, _locked=not read_only,
                _notes=notes, _quiet=_quiet)
            parent = _anchor.anchor_path(root).parent
            if not read_only and not os.access(parent, os.W_OK):
                raise LedgerError(
                    f"the folder {parent} holding the ledger {root} is not writable: the "
                    f"ledger's anchor ({_anchor.anchor_path(root).name}, the chain head kept "
                    "next to the folder) is rewritten there after each release. Refused "
                    "before any data was read.\nHint: make the folder writable by the curator, "
                    "or keep the ledger in a folder of its own the curator can write (e.g. "
                    "ledgers/<series>).")
            recorded = entries[0]["lifetime_budget"]
            if lifetime_budget is not None:
                asked = budget_spec(Budget.coerce(lifetime_budget) or Budget(1.0))
                if asked != recorded:
                    raise LedgerError(
                        f"the ledger {root} has the lifetime budget {recorded!r}; this run "
                        f"asks for {asked!r}. A series keeps one lifetime budget (a larger "
                        "one would weaken the guarantee given for past releases).\nHint: give "
                        "the recorded budget (or none), or start a new series.")
            if not read_only:  # a reader ignores an interrupted run's Delta versions
                cls._rollback(root, entries)
            state = (pl.concat([pl.read_parquet(io.BytesIO(b)) for b in state_bytes],
                               how="diagonal_relaxed") if state_bytes else None)
        except BaseException:
            lock.release()
            if _notes is not None:  # the anchor was written: its notice is not lost
                _notes.extend(notes)
            raise
        led = cls(root, lock, entries, state, autocommit, read_only)
        led.open_warnings = notes
        if _notes is not None:
            _notes.extend(notes)
        return led

    @classmethod
    def create(cls, path: str | os.PathLike[str], *, series: str,
               lifetime_budget: float | Mapping[Any, Any] | Budget,
               autocommit: bool = True,
               public: tuple[str | os.PathLike[str], ...] = (),
               start_over: bool = False) -> Ledger:
        """Start a release series: create its ledger at ``path`` (which must not exist) and open it.

        The ledger's anchor (``<parent>/.<name>.head.json``, see `verify_ledger`) is written
        with it. If an anchor is already there and records releases, the path held a series
        whose folder is gone (deleted, moved, not mounted): creating a ledger there would
        restart every unit's lifetime loss at zero, so it is refused unless ``start_over``.

        Args:
            path: The new ledger folder (created 0700); refused if anything is there.
            series: The series' name (a later open with another name is refused).
            lifetime_budget: Each unit's lifetime limit on ρ: a number, a ``{size: rho}``
                curve or ``{currency: curve}``, like ``Session(budget=...)``.
            autocommit: As in [`open`][tabdp.Ledger.open].
            public: Folders the ledger must not be in.
            start_over: Start a new series although the anchor at ``path`` records releases
                of an earlier one (the curator's deliberate decision: the earlier series'
                losses no longer count); its anchor is replaced.

        Returns:
            The open, empty ledger (close it, or use it as a context manager).

        Raises:
            LedgerError: Something already exists at ``path``, or its anchor records
                releases (without ``start_over``).
            InvalidParameterError: A missing series or budget, or a path in a public folder.

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "ledger"
            >>> with Ledger.create(p, series="cbp", lifetime_budget=4.0) as led:
            ...     led.releases
            0
        """
        given = Path(path).absolute()
        if given.exists() or given.is_symlink():
            raise LedgerError(
                f"cannot start a series at {given}: something is already there.\nHint: open "
                "an existing ledger with tabdp.Ledger.open(path), or give a new path.")
        root = _ledger_root(given)
        if not start_over:
            cls._refuse_vanished(root, create=True)
        return cls.open(root, series=series, lifetime_budget=lifetime_budget, create=True,
                        autocommit=autocommit, public=public, _new=True)

    @staticmethod
    def _refuse_vanished(root: Path, create: bool = False) -> None:
        """A new ledger at a missing folder whose anchor records releases: refused.

        ``open(create=True)`` (each year's script) and ``create`` (starting a series) alike;
        ``create(start_over=True)`` skips this check.
        """
        try:
            anchor = _anchor.read_anchor(root)
        except LedgerError:
            # an anchor that does not parse (or is a link): whether it records releases is
            # unknown, so it is not replaced without a decision, by ``create`` or by each
            # year's ``open(create=True)`` alike (review R18-4)
            if not create:
                raise LedgerError(
                    f"no ledger at {root}, and its anchor {_anchor.anchor_path(root)} is there "
                    "but is not a valid anchor file, so whether the series there recorded "
                    "releases is unknown; creating the ledger again could restart every "
                    "unit's lifetime loss at zero.\nHint: put back the ledger folder it "
                    "belongs to; to start the series over deliberately, "
                    "tabdp.Ledger.create(path, ..., start_over=True) or `tabdp ledger init "
                    "PATH ... --start-over`.") from None
            else:
                raise LedgerError(
                    f"cannot start a series at {root}: the anchor "
                    f"{_anchor.anchor_path(root)} is there but is not a valid anchor file, "
                    "so whether it records releases is unknown.\nHint: put back the ledger "
                    "folder it belongs to; to start a new series there deliberately, "
                    "tabdp.Ledger.create(path, ..., start_over=True) or `tabdp ledger init "
                    "PATH ... --start-over`.") from None
        if anchor is not None and anchor.releases and create:
            raise LedgerError(
                f"cannot start a series at {root}: its anchor {_anchor.anchor_path(root)} "
                f"records {anchor.releases} release(s) of a series there (chain head "
                f"{anchor.head[:16]}…), whose ledger folder is gone (deleted, moved or not "
                "mounted). A new ledger would restart every unit's lifetime loss at zero.\n"
                "Hint: put back the ledger folder (the copy whose `tabdp ledger show` ends "
                "with that chain head) and open it; to start a new series there deliberately "
                "(the earlier releases' losses no longer count), "
                "tabdp.Ledger.create(path, ..., start_over=True) or `tabdp ledger init PATH "
                "... --start-over`.")
        if anchor is not None and anchor.releases:
            raise LedgerError(
                f"no ledger at {root}, but its anchor {_anchor.anchor_path(root)} records "
                f"{anchor.releases} release(s) of a series there: the ledger folder was "
                "deleted, moved or not mounted, and creating it again would restart every "
                "unit's lifetime loss at zero.\nHint: put back the ledger folder (the copy "
                f"whose `tabdp ledger show` ends with chain head {anchor.head[:16]}…); to start "
                "the series over deliberately, tabdp.Ledger.create(path, ..., start_over=True) "
                "or `tabdp ledger init PATH ... --start-over`.")

    @staticmethod
    def _create(root: Path, series: str | None, budget: Any) -> None:
        if not isinstance(series, str) or not series.strip():
            raise InvalidParameterError(
                f"a new lifetime ledger needs the series' name; got series={series!r}.\nHint: "
                "Ledger.create(path, series='cbp-annual', lifetime_budget=10.0).")
        b = Budget.coerce(budget)
        if b is None:
            raise InvalidParameterError(
                "a new lifetime ledger needs a lifetime budget; got lifetime_budget=None.\n"
                "Hint: a number (every unit's lifetime ρ), a {size: rho} curve or "
                "{currency: curve}, e.g. lifetime_budget=10.0.")
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = root.parent / f".{root.name}.new-{uuid.uuid4().hex}"
        tmp.mkdir(mode=0o700)
        try:
            (tmp / "chain").mkdir(mode=0o700)
            entry: dict[str, Any] = {
                "format": FORMAT, "seq": 0, "prev": _GENESIS_PREV, "kind": "genesis",
                "series": series, "series_id": uuid.uuid4().hex, "created": _now(),
                "lifetime_budget": budget_spec(b), "unit_dtype": None, "state": None,
                "history": None}
            from tabdp._version import __version__
            entry["tabdp_version"] = __version__
            entry["hash"] = _entry_hash(entry)
            (tmp / "chain" / "00000000.json").write_bytes(_canon(entry))
            _private(tmp)
            os.rename(tmp, root)  # fails if root appeared meanwhile (a non-empty folder)
        except BaseException:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _fsync_dir(root.parent)
        # the anchor after the folder (a crash between: a missing anchor, written at the next
        # open); a creator that lost the race above never overwrites the winner's
        _anchor.write_anchor(root, [entry])

    @staticmethod
    def _rollback(root: Path, entries: list[dict[str, Any]]) -> None:
        """Restore Delta tables written after the chain head (an interrupted run) to it."""
        import shutil

        DeltaTable = _deltalake().DeltaTable

        for name in ("state", "history"):
            table = root / name
            # the last entry that wrote the table (a release that charged nobody writes none)
            part = next((e[name] for e in reversed(entries) if e.get(name) is not None), None)
            if not (table / "_delta_log").is_dir():
                continue
            if part is None:  # written only by a run that never committed: drop the table
                shutil.rmtree(table)
                continue
            recorded = ({f[0] for f in part["files"]} if name == "state" else
                        {f[0] for e in entries if e.get("history") for f in e["history"]["files"]})
            dt = DeltaTable(str(table))
            if dt.version() != part["version"] and _table_files(table) != recorded:
                with _owner_only_files():  # the restore's log entry, owner-only from the start
                    dt.restore(part["version"])
                _private(root)

    # -- public facts ---------------------------------------------------------------------------
    @property
    def releases(self) -> int:
        """Releases committed to the series so far.

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> Ledger.open(p, series="s", lifetime_budget=1.0, create=True).releases
            0
        """
        return len(self.entries) - 1

    def releases_public(self, before: int | None = None) -> list[dict[str, Any]]:
        """PUBLIC: each committed release's number, label, name and recorded public curves.

        Read from the chain entries (verified at open): never the state, the history, the
        data files' digests or the counts of units charged.

        Args:
            before: The first this many releases (``None``: every committed one).

        Returns:
            ``[{"seq", "label", "release", "curve"}]``: ``release`` the name (the label for an
            entry written before names were recorded), ``curve`` the recorded
            [`release_curve`][tabdp.privacy.lifetime.release_curve] or ``None`` (not
            recorded).

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> led = Ledger.create(p, series="s", lifetime_budget=1.0, autocommit=False)
            >>> _ = led.commit(label="2026", release="s_2026",
            ...                public_curve=release_curve([{"delta": 1.0, "rho": 0.25}]))
            >>> r = led.releases_public()[0]
            >>> r["release"], r["curve"]["total"]
            ('s_2026', [{'delta': 1.0, 'rho': 0.25}])
        """
        n = self.releases if before is None else before
        return [{"seq": e["seq"], "label": e.get("label"),
                 "release": e.get("release", e.get("label")),
                 "curve": e.get("public_curve")} for e in self.entries[1:n + 1]]

    def public(self, before: int | None = None,
               current: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """PUBLIC description: series, lifetime budget, past releases and the bound over them.

        Args:
            before: Describe the series as it was after this many releases (a session passes
                the count when it was created); ``None``: now.
            current: This release, ``{"release": name or None, "curve": recorded curve}``
                (a session passes its releases' curve, name ``None``); ``None``: the bound
                over the committed releases alone.

        Returns:
            ``series``, ``lifetime_budget``, ``releases_before``, ``labels_before``,
            ``releases_before_names``, ``guarantee_in_words`` (the cap), ``over_releases_in_words``
            and ``bound_over_releases`` (rows ``{"delta", "rho", "bound_by"}``: see
            [`history_in_words`][tabdp.privacy.lifetime.history_in_words]) and
            ``enforcement``: from the budget, the entries' labels, names and public curves,
            and ``current`` only.

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> Ledger.create(p, series="s", lifetime_budget=1.0).public()["releases_before"]
            0
        """
        n = self.releases if before is None else before
        past = self.releases_public(n)
        rels = [{"release": r["release"] if r["release"] is not None else f"#{r['seq']}",
                 "curve": r["curve"]} for r in past]
        if current is not None:
            rels.append({"release": current.get("release"), "curve": current.get("curve")})
        words, bound = history_in_words(self.series, self.budget, rels, "unit",
                                        current=current is not None)
        return {"series": self.series, "lifetime_budget": self.budget.to_dict(),
                "releases_before": n,
                "guarantee_in_words": self.guarantee_in_words("unit", before=n),
                "labels_before": [r["label"] for r in past],
                "releases_before_names": [r["release"] for r in past],
                "over_releases_in_words": words,
                "bound_over_releases": bound,
                "enforcement": "individual filter over the series' releases"}

    def guarantee_in_words(self, unit: str = "establishment",
                           sizes: Mapping[str, float] | None = None,
                           before: int | None = None) -> str:
        """PUBLIC: the lifetime guarantee in words, from the public budget only.

        Args:
            unit: What a unit is called.
            sizes: Under a curve budget, a size per currency to state the bound at.
            before: Releases before this one (``None``: those committed now).

        Returns:
            One sentence (bounds rounded up).

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> text = Ledger.create(p, series="cbp", lifetime_budget=4.0).guarantee_in_words()
            >>> text[:60]
            "Over the releases of the series 'cbp' (this one included), e"
            >>> "every establishment's total loss is at most rho = 4 (zCDP)" in text
            True
        """
        from tabdp.planning import upper_3g

        n = self.releases if before is None else before
        done = f" ({n} before this one)" if n else ""
        head = f"Over the releases of the series {self.series!r}{done} (this one included), "
        tail = (": its lifetime budget, enforced by an individual filter that leaves it out of "
                "any table that would pass it.")
        b = self.budget
        if b.constant is not None:
            return (f"{head}every {unit}'s total loss is at most rho = "
                    f"{upper_3g(b.constant)} (zCDP){tail}")
        assert b.curves is not None
        parts = []
        for cur, size in (sizes or {}).items():
            parts.append(f"rho = {upper_3g(float(b.limit([size], cur)[0]))} in {cur} at size "
                         f"{size:,g}")
        at = ("; ".join(parts) + " (at most, per currency)") if parts else (
            "the lifetime budget curve of each currency at its largest size there")
        total = "" if b.total is None else f", and at most rho = {upper_3g(b.total)} in all"
        return f"{head}an {unit}'s total loss is bounded by {at}{total}{tail}"

    # -- lookups --------------------------------------------------------------------------------
    def _id_kind(self) -> str | None:
        """The id type units are keyed by: the series', else this run's (``None``: neither).

        A series without a committed release takes the type of this run's first recorded
        release (`note_unit_type`, from its schema) or, for charges made directly, of the
        units charged: a later release of the run with ids of the other type is refused as
        one of a later run is, whether or not the first release charged anybody (review r88:
        the run's type was only that of the units charged, so after a first release over no
        rows such a release went through, and after one holding a unit it failed with a raw
        Polars error naming that unit's id).
        """
        if self.unit_dtype is not None:
            return self.unit_dtype
        if self._run_kind is not None:
            return self._run_kind
        units = self._tot.units
        if units is not None and len(units):
            return "Int64" if units.dtype == pl.Int64 else "String"
        return None

    def _units(self, units: Any) -> pl.Series:
        s = units if isinstance(units, pl.Series) else pl.Series("unit", units)
        pinned = self._id_kind()
        if s.dtype == pl.Null:
            return s.cast(pl.Int64 if pinned in (None, "Int64") else pl.String)
        kind = _unit_kind(s.dtype)
        if pinned is not None and kind != pinned:
            raise InvalidParameterError(
                f"the ledger of series {self.series!r} keys units by {pinned} ids; "
                f"this release's unit ids are {s.dtype}.\nHint: cast the unit id column to "
                f"{pinned} (the same type in every run of the series).")
        return s.cast(pl.Int64 if kind == "Int64" else pl.String).rename("unit")

    def lookup(self, units: Any, cols: list[str]) -> dict[str, np.ndarray]:
        """CONFIDENTIAL lifetime totals of ``cols`` for ``units``: stored plus uncommitted.

        Units the series never charged have 0.

        Args:
            units: Unit ids (a Polars Series or array).
            cols: Ledger columns (``rho``, ``rho@<currency>``, ``size@<currency>``, ...).

        Returns:
            Column → float64 array aligned with ``units``.

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> led = Ledger.open(p, series="s", lifetime_budget=1.0, create=True)
            >>> led.lookup(pl.Series([7]), ["rho"])["rho"].tolist()
            [0.0]
        """
        return self._tot.lookup(self._units(units), cols)

    def totals(self, cols: list[str]) -> pl.DataFrame:
        """CONFIDENTIAL: every unit's lifetime totals of ``cols``, stored plus uncommitted.

        One row per unit the series (or this run so far) charged; a column never charged is
        0.0. What `lookup` reads, as one frame: an engine that joins it to its units (Spark)
        instead of asking per unit.

        Args:
            cols: Ledger columns (``rho``, ``rho@<currency>``, ``size@<currency>``, ...).

        Returns:
            ``unit`` (Int64 or String ids) and ``cols`` (Float64).

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> led = Ledger.open(p, series="s", lifetime_budget=1.0, create=True)
            >>> led.charge(pl.Series([3]), {"rho": np.array([0.25])}, {})
            >>> led.totals(["rho", "rho@x"]).rows()
            [(3, 0.25, 0.0)]
        """
        tot = self._tot
        if tot.units is None or not len(tot.units):
            dt = pl.String if self._id_kind() == "String" else pl.Int64
            return pl.DataFrame({"unit": pl.Series([], dtype=dt),
                                 **{c: pl.Series([], dtype=pl.Float64) for c in cols}})
        n = len(tot.units)
        # copies: the run's arrays change in place at the next charge
        vals = {c: tot.life[c].copy() if c in tot.life else np.zeros(n) for c in cols}
        return pl.DataFrame({"unit": tot.units.rename("unit"),
                             **{c: pl.Series(c, v, dtype=pl.Float64) for c, v in vals.items()}})

    def lookup_lifetime(self) -> Callable[[Any, list[str]], dict[str, np.ndarray]]:
        """``lookup(units, cols)`` for the lifetime filter (stored plus this run's so far).

        The same values as [`lookup`][tabdp.Ledger.lookup], but where ``units`` are the
        ledger's own units, id for id (the common case in unit mode), a column comes as a
        read-only view of the run's totals instead of a copy: valid until the next charge,
        which the filter (it reads them at once, to decide) never outlives.

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> look = Ledger.create(p, series="s", lifetime_budget=1.0).lookup_lifetime()
            >>> look(pl.Series(["a"]), ["rho"])["rho"].tolist()
            [0.0]
        """
        def look(units: Any, cols: list[str]) -> dict[str, np.ndarray]:
            return self._tot.lookup(self._units(units), cols, copy=False)

        return look

    # -- charging and committing ------------------------------------------------------------------
    def note_unit_type(self, dtype: Any) -> None:
        """Record the unit column's type of a release of this run (its schema, never its data).

        A series keys its units by the id type of its first committed release (``Int64`` or
        ``String``); a later release of the other type is refused. That type comes from the
        releases' schema, so a release that charged nobody (no rows, or every unit left out)
        fixes it as one that charged units does: a series' next refusal never depends on
        whether one record was in an earlier release (review r83). A session calls this for
        each release it records; types the ledger cannot key (refused by `lookup`) and
        ``None`` are ignored.

        Args:
            dtype: The Polars dtype of the release's unit column (``None``: not known).

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> led = Ledger.create(p, series="s", lifetime_budget=1.0, autocommit=False)
            >>> led.note_unit_type(pl.String)
            >>> led.commit(label="empty")["unit_dtype"]
            'String'
        """
        if dtype is None or self.unit_dtype is not None or self._run_kind is not None:
            return
        from tabdp.privacy.ledger import id_kind

        kind = id_kind(dtype)
        if dtype == pl.UInt64 or kind == "other":
            return
        self._run_kind = "Int64" if kind == "integer" else "String"

    @contextlib.contextmanager
    def one_release(self) -> Iterator[Ledger]:
        """Hold the ledger for one release: from its lifetime filter to its charge and commit.

        Every engine's release holds it (`tabdp.frame.releases`): sessions sharing this
        ledger, one thread each, take turns, so a release filters on the charges of every
        release before it. Without it two releases at once both passed the filter on the same
        lifetime losses, and every unit could pass the lifetime budget (review rev63e).
        `commit` and `close` wait for a release under way too. Reentrant: a release of the
        same thread (several tables of one run) holds it again.

        Yields:
            The ledger.

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> led = Ledger.create(p, series="s", lifetime_budget=1.0)
            >>> with led.one_release(), led.one_release():
            ...     led.releases
            0
            >>> led.close()
        """
        with self._turn:
            yield self

    def check_release(self, dtype: Any) -> None:
        """Refuse a release on this ledger before any data is read (from its schema only).

        Every engine calls it with the release's unit column type (its schema, never its data)
        before it reads a row: a closed ledger is refused (its lock is released: another run
        may be charging it), as are unit ids the ledger cannot key or of another type than the
        series' (`lookup`'s refusals). Each refusal is the same whatever the data (review
        rev63l: a closed ledger refused a release holding a unit at its charge, after the data,
        and let one over no rows through).

        Args:
            dtype: The Polars dtype of the release's unit column.

        Raises:
            LedgerError: The ledger is closed.
            InvalidParameterError: Ids the ledger cannot key, or of another type than the
                series'.

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> led = Ledger.create(p, series="s", lifetime_budget=1.0)
            >>> led.check_release(pl.Int32)
            >>> led.close()
            >>> try:
            ...     led.check_release(pl.Int32)
            ... except LedgerError as err:
            ...     print(str(err).splitlines()[0][-10:])
            is closed.
        """
        self._check_open()
        self.lookup(pl.Series("unit", [], dtype=dtype), ["rho"])

    def charge(self, units: Any, sums: Mapping[str, np.ndarray],
               maxes: Mapping[str, np.ndarray], *,
               within: tuple[Any, np.ndarray] | None = None) -> None:
        """Add a release's admitted losses to the uncommitted part (ids unique in a call).

        Args:
            units: Unit ids.
            sums: Columns added per unit (``rho``, ``rho@c``...).
            maxes: Columns maximised per unit (``size``, ``size@c``).
            within: ``(all_units, kept)``: ``units`` are ``all_units`` where ``kept`` is True
                (the units the filter admitted of those it just looked up). Their places in
                the ledger are then taken from that lookup's (once ``units`` is checked to be
                that subset) instead of searched again; the result is the same.

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> led = Ledger.open(p, series="s", lifetime_budget=1.0, autocommit=False, create=True)
            >>> led.charge(pl.Series([1]), {"rho": np.array([0.25])}, {})
            >>> led.lookup(pl.Series([1]), ["rho"])["rho"].tolist()
            [0.25]
        """
        self._check_open()
        u = self._units(units)
        if not len(u):
            return
        if u.null_count():
            raise InvalidParameterError(
                "a lifetime ledger needs a unit id for every unit; this release charged a unit "
                "with a null id.\nHint: drop or fill rows without a unit id before the release.")
        if within is not None:
            self._tot.note_subset(u, self._units(within[0]), within[1])
        self._tot.charge(u, sums, maxes)

    def commit(self, *, spec_hash: str | None = None, manifest_hash: str | None = None,
               label: str | None = None, release: str | None = None,
               public_curve: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Commit the uncommitted losses as one release of the series (atomically).

        Writes the history rows and the new state (Delta commits), then the chain entry, which
        is the commit point: it is created only if no other entry took its number (a
        concurrent writer is refused, never an update lost). A run killed before it leaves the
        ledger at its previous state (the next open restores the Delta tables to the chain).
        Then the anchor next to the folder is rewritten to the new head (a run killed in
        between leaves it one entry behind, which the next open accepts and brings up to date).

        Args:
            spec_hash: The release spec's hash: the SHA-256 of the spec file's bytes (the
                run's confidential ``spec_sha256``; the public manifest's hash is
                ``manifest_hash``, which ties an entry to a published release).
            manifest_hash: SHA-256 of the release's public ``manifest.json``.
            label: A label for the release (e.g. ``"2026"``).
            release: The release's name (PUBLIC; ``None``: the label).
            public_curve: The release's public worst-case curves
                ([`release_curve`][tabdp.privacy.lifetime.release_curve]'s form: from the
                spec and policy curves, never from records); ``None``: not recorded (the
                series' statements then bound this release by the lifetime budget alone).

        Returns:
            The chain entry written.

        Raises:
            LedgerError: Another writer committed this release number first, or the ledger
                was opened ``read_only``.
            InvalidParameterError: A malformed ``public_curve`` or a release name that is not
                text (refused before anything is written).

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> led = Ledger.open(p, series="s", lifetime_budget=1.0, autocommit=False, create=True)
            >>> led.charge(pl.Series([1]), {"rho": np.array([0.25])}, {})
            >>> led.commit(label="2026")["seq"]
            1
        """
        with self._turn:  # after a release under way on another thread (`one_release`)
            return self._commit(spec_hash, manifest_hash, label, release, public_curve)

    def _commit(self, spec_hash: str | None, manifest_hash: str | None, label: str | None,
                release: str | None, public_curve: Mapping[str, Any] | None
                ) -> dict[str, Any]:
        self._check_open()
        if self.read_only:
            raise LedgerError(
                f"the ledger {self.path} was opened read-only (read_only=True): its charges are "
                "never committed. Nothing was written.\nHint: open it without read_only to "
                "commit a release.")
        name = label if release is None else release
        if name is not None and not isinstance(name, str):
            raise InvalidParameterError(
                f"Ledger.commit: release must be text (the release's public name); got "
                f"{type(name).__name__} {name!r}.\nHint: release='cbp_2026'.")
        curve = None
        if public_curve is not None:
            try:
                curve = _checked_curve(public_curve)
            except ValueError as err:
                raise InvalidParameterError(
                    f"Ledger.commit: {err}.\nHint: build it with "
                    "tabdp.privacy.lifetime.release_curve(total_policy_curve, ...).") from None
        write_deltalake = _deltalake().write_deltalake

        from tabdp._version import __version__

        run = self._tot.history_rows()
        seq = len(self.entries)
        head = self.entries[-1]
        unit_dtype = self.unit_dtype
        if run is not None and unit_dtype is None:
            unit_dtype = "Int64" if run["unit"].dtype == pl.Int64 else "String"
        elif unit_dtype is None:  # nobody charged: the type of the releases' unit column
            unit_dtype = self._run_kind
        with _owner_only_files():
            hist_rel: list[list[Any]] = []
            if run is not None:
                rows = run.with_columns(pl.lit(seq, pl.Int64).alias("release"))
                rows = rows.select("release", "unit", *[c for c in rows.columns
                                                        if c not in ("release", "unit")])
                fast = _write_delta(self.path / "history", rows, "append")
                if fast is not None:
                    hist_version, hist_rel = fast
                else:  # a new column (another currency): delta-rs merges the schema
                    before = _table_files(self.path / "history")
                    write_deltalake(str(self.path / "history"), rows.to_arrow(), mode="append",
                                    schema_mode="merge", writer_properties=_writer())
                    hist_version, hist_rel = _head_files(self.path / "history", skip=before)
                hist_part: dict[str, Any] | None = {"version": hist_version, "files": hist_rel,
                                                    "units": rows.height}
            else:
                hist_part = None
            new_state = self._tot.new_state()
            if new_state is not None and run is not None:
                fast = _write_delta(self.path / "state", new_state, "overwrite")
                if fast is not None:
                    st_version, st_files = fast
                else:  # another set of columns: delta-rs overwrites the schema
                    write_deltalake(str(self.path / "state"), new_state.to_arrow(),
                                    mode="overwrite", schema_mode="overwrite",
                                    writer_properties=_writer())
                    st_version, st_files = _head_files(self.path / "state")
                state_part: dict[str, Any] | None = {"version": st_version, "files": st_files,
                                                     "units": new_state.height}
            else:
                state_part = head.get("state")
            digests = [f[2] for part in (state_part, hist_part) if part for f in part["files"]]
            entry: dict[str, Any] = {
                "format": FORMAT_BLAKE3 if any(d.startswith(_BLAKE3) for d in digests)
                else FORMAT, "seq": seq, "prev": head["hash"], "kind": "release",
                "series": self.series, "series_id": head["series_id"], "created": _now(),
                "label": label, "release": name, "public_curve": curve,
                "spec_hash": spec_hash, "manifest_hash": manifest_hash,
                "lifetime_budget": self.entries[0]["lifetime_budget"],
                "unit_dtype": unit_dtype, "state": state_part, "history": hist_part,
                "tabdp_version": __version__}
            entry["hash"] = _entry_hash(entry)
            chain = self.path / "chain"
            tmp = chain / f".{seq:08d}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "wb") as fh:
                fh.write(_canon(entry))
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, chain / f"{seq:08d}.json")  # put-if-absent: the commit point
            except FileExistsError:
                raise LedgerError(
                    f"the ledger {self.path} received release {seq} from another writer while "
                    "this run held it open; this run's losses were NOT committed (nothing was "
                    "lost: the other release stands).\nHint: do not publish this run's "
                    "outputs; run again.") from None
            finally:
                tmp.unlink(missing_ok=True)
            _fsync_dir(chain)
        self.entries.append(entry)
        self.unit_dtype = unit_dtype
        self._state = new_state
        self._tot = _RunTotals(new_state)
        self.pending_releases = []
        # the anchor, once the entry is durable: a crash before this line leaves it one entry
        # behind, at the previous head, which the next open accepts and brings up to date
        _anchor.write_anchor(self.path, self.entries)
        if run is not None:
            _vacuum(self.path / "state")
        _private(self.path)
        return entry

    # -- reading ------------------------------------------------------------------------------
    def state(self) -> pl.DataFrame:
        """CONFIDENTIAL: each unit's committed lifetime totals (one row per unit ever charged).

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> Ledger.open(p, series="s", lifetime_budget=1.0, create=True).state().columns
            ['unit', 'rho']
        """
        if self._state is None:
            return pl.DataFrame({"unit": pl.Series([], dtype=pl.Int64),
                                 "rho": pl.Series([], dtype=pl.Float64)})
        return self._state

    def history(self) -> pl.DataFrame:
        """CONFIDENTIAL: per committed release and unit charged, its losses.

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> Ledger.open(p, series="s", lifetime_budget=1.0, create=True).history().height
            0
        """
        files = [self.path / f[0] for e in self.entries if e.get("history")
                 for f in e["history"]["files"]]
        if not files:
            return pl.DataFrame({"release": pl.Series([], dtype=pl.Int64)})
        return pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")

    # -- closing ------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._lock is None:
            raise LedgerError(f"the ledger {self.path} is closed.\nHint: open it again with "
                              "tabdp.Ledger.open.")

    def allow_discard(self) -> None:
        """Let `close` drop uncommitted charges without a warning.

        The release workflow opens its ledger with ``autocommit=False`` and closes it without
        committing only when nothing was published (a failed run).

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> led = Ledger.create(p, series="s", lifetime_budget=1.0, autocommit=False)
            >>> led.allow_discard(); led.close()
        """
        self._discard_ok = True

    def close(self) -> None:
        """Release the lock (uncommitted losses are dropped; silently when read-only).

        Example:
            >>> import tempfile, pathlib
            >>> p = pathlib.Path(tempfile.mkdtemp()) / "l"
            >>> led = Ledger.create(p, series="s", lifetime_budget=1.0); led.close(); led.close()
        """
        with self._turn:  # after a release under way on another thread (`one_release`)
            if self._lock is not None:
                if self._tot.pending and not (self._discard_ok or self.read_only):
                    import warnings

                    from tabdp.exceptions import PrivacyWarning

                    warnings.warn(
                        f"the ledger {self.path} was closed with charges NOT committed: the "
                        "releases made since its last commit are not counted in the series' "
                        "lifetime losses. If their tables were (or will be) published, the "
                        "lifetime guarantee does not hold for them.\nHint: call "
                        "session.commit_ledger() before closing (or open with autocommit=True).",
                        PrivacyWarning, stacklevel=2)
                self._lock.release()
                self._lock = None
            self._tot = _RunTotals(self._state)
            self.pending_releases = []

    def __enter__(self) -> Ledger:
        """The ledger itself."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the ledger."""
        self.close()

    def __repr__(self) -> str:
        """Public facts only."""
        return (f"Ledger(series={self.series!r}, lifetime_budget={self.budget!r}, "
                f"releases={self.releases})")


def _positions(keys: pl.Series, query: pl.Series) -> tuple[np.ndarray | None, np.ndarray]:
    """Where each id of ``query`` is in ``keys`` (sorted, unique): ``(pos, hit)``.

    ``pos`` is ``None`` when ``query`` is ``keys`` itself, id for id (the common case: a
    release's queries charge the same units): callers then work on whole arrays, no gather.
    Integer ids by binary search (numpy), text ids by a hash join; a null id is never found.
    """
    n = len(query)
    if not len(keys) or not n:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    if len(keys) == n and not query.null_count() and query.dtype == keys.dtype and (
            query is keys or query.equals(keys)):
        return None, np.ones(n, dtype=bool)
    if keys.dtype == pl.Int64 and query.dtype == pl.Int64:
        k = keys.to_numpy()
        valid = None if not query.null_count() else query.is_not_null().to_numpy()
        q = query.to_numpy() if valid is None else query.fill_null(0).to_numpy()
        if valid is None and strictly_increasing(q):  # sorted ids (unit mode): a merge join
            return sorted_search(k, q)
        pos = np.searchsorted(k, q)
        hit = pos < k.size
        hit[hit] = k[pos[hit]] == q[hit]
        if valid is not None:
            hit &= valid
        pos[~hit] = 0
        return pos, hit
    idx = pl.DataFrame({"unit": keys.cast(query.dtype) if keys.dtype != query.dtype else keys,
                        "__i": pl.int_range(len(keys), dtype=pl.Int64, eager=True)})
    got = pl.DataFrame({"unit": query}).join(idx, on="unit", how="left", maintain_order="left")
    i = got["__i"]
    return i.fill_null(0).to_numpy().astype(np.int64), i.is_not_null().to_numpy()


def _first(op: Any, x: np.ndarray) -> np.ndarray:
    """``op(0.0, x)`` as a new array: for `_add_up`, the plain ``0.0 + x``.

    Adding to 0.0 is exact (no rounding error: ``add_up`` never moves it), so the sum is one
    pass instead of `add_up`'s error check (the same doubles, ``-0.0`` made ``0.0`` alike).
    """
    if op is _add_up:
        return np.add(0.0, x)
    out: np.ndarray = op(0.0, x)
    return out


def _same_doubles(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Both ``None``, or two float64 arrays of the same doubles bit for bit (-0.0 is not 0.0)."""
    if a is None or b is None:
        return a is None and b is None
    if a is b:
        return True
    if a.shape != b.shape or a.dtype != np.float64 or b.dtype != np.float64:
        return False
    ia, ib = np.ascontiguousarray(a).view(np.int64), np.ascontiguousarray(b).view(np.int64)
    head = min(ia.size, 1024)  # columns that differ mostly differ early: a cheap look first
    return bool(np.array_equal(ia[:head], ib[:head])) and bool(np.array_equal(ia, ib))


def _own_or_frozen(col: pl.Series) -> np.ndarray:
    """A state column as float64: a copy of its own (writable), or a read-only view of it."""
    a = col.to_numpy()  # Polars gives a view of its memory read-only, a copy writable
    if a.dtype != np.float64:
        return a.astype(np.float64)  # a new array: this run's own
    return a


class _RunTotals:
    """This run's uncommitted charges, in memory, merged into the stored state once at commit.

    One index of unit ids (sorted, unique): the state's units, plus the units new to the
    series that this run charged (inserted, one sort, when first charged). Aligned with it:
    ``life``, each unit's lifetime totals (the state's, copied on the first charge of a
    column, plus this run's charges added in place one release at a time, in the order the
    filter checked them: a recorded total is the very double the filter compared with the
    budget); ``run``, this run's totals (the history rows of the next commit); ``charged``,
    the units this run charged. A charge is one contiguous add (or maximum) per column and
    array, after one scatter of the charges into a zero-filled array when it charges part
    of the index (an uncharged unit adds 0.0, which keeps its total); a column charged 0.0
    everywhere is skipped; no table is rebuilt. At commit ``life`` is
    the new state as it stands. Memory: a few arrays per unit of the series, whatever its
    length in releases.
    """

    def __init__(self, state: pl.DataFrame | None) -> None:
        self.state = state
        self.units: pl.Series | None = None if state is None else state["unit"]
        # a column read in several chunks comes as a copy (writable: this run's own array,
        # charged in place); one in a single chunk as a read-only view of the state (a charge
        # then writes a new array, once)
        self.life: dict[str, np.ndarray] = {} if state is None else {
            c: _own_or_frozen(state[c]) for c in state.columns if c != "unit"}
        self.run: dict[str, np.ndarray] = {}
        self.charged: np.ndarray | None = None
        self._found: tuple[Any, ...] | None = None

    def _where(self, u: pl.Series) -> tuple[np.ndarray | None, np.ndarray]:
        assert self.units is not None
        f = self._found
        if f is not None and f[1] is self.units and (f[0] is u or (
                len(f[0]) == len(u) and f[0].equals(u, check_dtypes=True))):
            # the filter's lookups and the charge that follows ask the same units (a new
            # Series each time): one comparison instead of a binary search per call
            return f[2], f[3]
        pos, hit = _positions(self.units, u)
        self._found = (u, self.units, pos, hit)
        return pos, hit

    def note_subset(self, u: pl.Series, parent: pl.Series, kept: np.ndarray) -> None:
        """Where ``u`` is, from the last lookup's positions when ``u`` is ``parent[kept]``.

        The lifetime filter looked ``parent`` up; the charge that follows asks for the units it
        admitted. When the cached lookup is ``parent``'s (same ids, same index) and ``u`` is
        ``parent`` where ``kept``, id for id, ``u``'s positions are the cached ones where
        ``kept``: no second search. Otherwise nothing is noted (`_where` searches).
        """
        f = self._found
        kept = np.asarray(kept, dtype=bool)
        if (f is None or self.units is None or f[1] is not self.units or kept.ndim != 1
                or kept.size != len(parent) or int(np.count_nonzero(kept)) != len(u)):
            return
        if not (f[0] is parent or (len(f[0]) == len(parent)
                                   and f[0].equals(parent, check_dtypes=True))):
            return
        if not parent.filter(pl.Series(kept)).equals(u, check_dtypes=True):
            return
        pos, hit = f[2], f[3]
        self._found = (u, self.units, np.flatnonzero(kept) if pos is None else pos[kept],
                       hit[kept])

    def lookup(self, u: pl.Series, cols: list[str], copy: bool = True) -> dict[str, np.ndarray]:
        """Lifetime totals of ``cols`` for ``u`` (0 for units the series never charged).

        ``copy=False``: where ``u`` is the index itself, read-only views of the run's arrays
        (valid until the next charge, which changes them in place) instead of copies.
        """
        n = len(u)
        if self.units is None or not len(self.units):
            return {c: np.zeros(n) for c in cols}
        pos, hit = self._where(u)
        miss = None if pos is None or hit.all() else ~hit
        out = {}
        for c in cols:
            arr = self.life.get(c)
            if arr is None:
                out[c] = np.zeros(n)
            elif pos is None:
                if copy:  # the run's arrays change in place at the next charge
                    out[c] = arr.copy()
                else:
                    out[c] = arr.view()
                    out[c].flags.writeable = False
            else:
                v = arr.take(pos)  # a miss has position 0: zeroed below (no boolean gathers)
                if miss is not None:
                    v[miss] = 0.0
                out[c] = v
        return out

    @property
    def pending(self) -> bool:
        """Whether this run charged anything not committed."""
        return self.charged is not None and bool(self.charged.any())

    def charge(self, u: pl.Series, sums: Mapping[str, np.ndarray],
               maxes: Mapping[str, np.ndarray]) -> None:
        """Add a release's losses (ids unique in ``u``)."""
        if self.units is None:
            self.units = u.head(0)
        pos, hit = self._where(u)
        if not hit.all():  # units new to the series: inserted once, in id order
            new = u.filter(pl.Series(~hit))
            merged = pl.concat([self.units, new])
            idx = merged.arg_sort().to_numpy()
            k = len(new)
            for d in (self.life, self.run):
                for c in d:
                    d[c] = np.concatenate([d[c], np.zeros(k)])[idx]
            if self.charged is not None:
                self.charged = np.concatenate([self.charged, np.zeros(k, dtype=bool)])[idx]
            self.units = merged.gather(idx)
            pos, hit = self._where(u)
        n = len(self.units)
        if self.charged is None:
            self.charged = np.zeros(n, dtype=bool)
        # sums rounded up (`add_up`): a lifetime total is never below the exact sum of its
        # runs' losses; the first charge of a column (0.0 + x) is exact either way
        scratch: np.ndarray | None = None  # one scatter buffer for every column of the charge
        twins = self._twins(sums)
        for group, op in ((sums, _add_up), (maxes, np.maximum)):
            for c, v in group.items():
                x = np.asarray(v, dtype=np.float64)
                life = self.life.get(c)
                if group is sums and c in twins and x.any():  # the same charge on the same
                    # totals as a column done above (``rho_z`` of a zCDP release is ``rho``):
                    # its doubles, copied instead of added again
                    j = twins[c]
                    for d in (self.life, self.run):
                        dst = d.get(c)
                        if dst is not None and dst.flags.writeable:
                            np.copyto(dst, d[j])  # into the run's own array (no fresh one)
                        else:
                            d[c] = d[j].copy()
                    continue
                if not x.any():
                    # every charge 0.0 (a component this release does not use: eps_a,
                    # delta_a, rho_g...): adding it, or the maximum with it (losses and sizes
                    # are >= 0), changes no total; the column is kept, nothing copied
                    if life is None:
                        self.life[c] = np.zeros(n)
                    if c not in self.run:
                        self.run[c] = np.zeros(n)
                    continue
                r = self.run.get(c)
                own = False  # ``full`` is a new array that becomes the run's column
                if pos is None:
                    full = x
                elif r is None:  # the run's first charge of the column: laid out in a new
                    # array that becomes the run's own below (no scratch copy: on a loaded
                    # machine a fresh array's page faults cost more than the arithmetic)
                    full = np.zeros(n)
                    full[pos] = x
                    own = True
                else:  # the charged units' values at their index positions, 0.0 elsewhere
                    # (one buffer, refilled per column: no results below alias it)
                    if scratch is None:
                        scratch = np.zeros(n)
                    else:
                        scratch.fill(0.0)
                    full = scratch
                    full[pos] = x
                # contiguous whole-array operations (no gather/scatter per array); an
                # uncharged unit adds 0.0 (or takes the maximum with 0.0): its total is kept
                if r is not None:
                    op(r, full, out=r)
                elif not own:  # the run's first charge of the column: 0.0 + x, which is
                    # exact (the double `add_up` returns: a plain add, not its six-pass check)
                    self.run[c] = _first(op, full)
                if life is None:
                    self.life[c] = _first(op, full)
                elif not life.flags.writeable:  # the state's column: a new array, once
                    self.life[c] = op(life, full)
                else:
                    op(life, full, out=life)
                if own:  # now the run's column: 0.0 + x (or max(0.0, x)) in place, the
                    # doubles `_first` gives (after the lifetime totals took x as it is)
                    if op is _add_up:
                        np.add(0.0, full, out=full)
                    else:
                        op(0.0, full, out=full)
                    self.run[c] = full
        if pos is None:
            self.charged[:] = True
        else:
            self.charged[pos] = True

    def _twins(self, sums: Mapping[str, np.ndarray]) -> dict[str, str]:
        """Sum columns charged the very array of an earlier one, on bit-equal totals.

        ``{c: j}``: column ``c`` is charged ``sums[j]`` itself (the same object) and its
        lifetime and run totals hold the same doubles as ``j``'s, bit for bit (or neither
        exists). Its totals after the charge are then ``j``'s: copied, not added again.
        """
        out: dict[str, str] = {}
        names = list(sums)
        for i, c in enumerate(names):
            for j in names[:i]:
                if j in out or sums[j] is not sums[c]:
                    continue
                if all(_same_doubles(d.get(j), d.get(c)) for d in (self.life, self.run)) and (
                        c in self.life) == (j in self.life) and (c in self.run) == (j in self.run):
                    out[c] = j
                    break
        return out

    def history_rows(self) -> pl.DataFrame | None:
        """This run's totals, one row per unit charged (sorted by unit), or ``None``."""
        if not self.pending:
            return None
        assert self.units is not None and self.charged is not None
        if self.charged.all():
            return pl.DataFrame({"unit": self.units.rename("unit"),
                                 **{c: pl.Series(c, v, dtype=pl.Float64)
                                    for c, v in self.run.items()}})
        m = self.charged
        return pl.DataFrame({"unit": self.units.filter(pl.Series(m)).rename("unit"),
                             **{c: pl.Series(c, v[m], dtype=pl.Float64)
                                for c, v in self.run.items()}})

    def new_state(self) -> pl.DataFrame | None:
        """The state after this run (the stored one if this run charged nothing)."""
        if not self.pending:
            return self.state
        assert self.units is not None
        return pl.DataFrame({"unit": self.units.rename("unit"),
                             **{c: pl.Series(c, v, dtype=pl.Float64)
                                for c, v in self.life.items()}})

def _writer() -> Any:
    """Parquet settings of the ledger's files: no dictionaries, statistics on the unit id only.

    Losses are distinct doubles (dictionaries do not pay) and nothing filters on them: at
    1M units x 15 columns this writes in 0.7 s instead of 1.6-2.0 s (delta-rs 1.6.6, loaded
    2-core machine).
    """
    dl = _deltalake()
    plain = dl.ColumnProperties(dictionary_enabled=False, statistics_enabled="NONE")
    return dl.WriterProperties(default_column_properties=plain, column_properties={
        "unit": dl.ColumnProperties(dictionary_enabled=False, statistics_enabled="CHUNK")})


def _hash_fd(fd: int) -> tuple[int, str]:
    """``(size, digest)`` of the file open as ``fd`` (readable), in the algorithm of `_file_hasher`.

    Hashed through a memory map of the descriptor (no copy of its bytes into this process, and
    the file hashed is the one created, whatever its name points to now).
    """
    import mmap

    h = _file_hasher()
    size = os.fstat(fd).st_size
    if size:
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mm:
            h.update(mm)
    return size, _digest(h)


def _parquet_layout(df: pl.DataFrame) -> dict[str, Any]:
    """How each column of a ledger file is encoded (pyarrow's ``write_table`` options).

    * integer unit ids: ``DELTA_BINARY_PACKED`` (sorted ids: a few bits each instead of 8 bytes);
      text ids: snappy;
    * constant columns (``eps_a``, ``delta_a`` of a zCDP series, ``epsilon`` all ``inf``):
      snappy, which shrinks them to almost nothing;
    * columns of few distinct values (``rho@rows``, a currency whose units all have one of a
      few sizes: at most 1 in 16 distinct in a sample of 65,536): a dictionary;
    * every other column (distinct doubles, which neither snappy nor a dictionary shrinks,
      but both cost CPU): plain, uncompressed.

    At 10M units x 14 columns (the benchmark's state) the file is 524 MB instead of 775 and
    hashing, reading and parsing it at open takes 1.03 CPU-s instead of 1.25, writing it the
    same (1.07; BLAKE3, loaded 2-core machine). The layout changes the file's bytes, never its
    values: every Parquet reader (Polars, delta-rs, Spark) reads these encodings.
    """
    compression: dict[str, str] = {}
    dictionary: list[str] = []
    encoding: dict[str, str] = {}
    for c in df.columns:
        col = df[c]
        compression[c] = "none"
        if c == "unit":
            if col.dtype == pl.Int64:
                encoding[c] = "DELTA_BINARY_PACKED"
            else:
                compression[c] = "snappy"
        elif not col.dtype.is_float() or not len(col):
            continue
        else:  # decided on a sample: a whole-column pass only for a column that looks constant
            a = col.to_numpy()
            sample = a[::max(1, a.size // 65536)]
            distinct = np.unique(sample).size
            if distinct == 1 and not col.null_count() and bool((a == sample[0]).all()):
                compression[c] = "snappy"
            elif distinct * 16 <= sample.size:  # indices of 12 bits or fewer, not 64
                dictionary.append(c)
    return {"compression": compression, "use_dictionary": dictionary,
            "column_encoding": encoding, "write_statistics": False}


def _write_delta(table: Path, df: pl.DataFrame, mode: str) -> tuple[int, list[list[Any]]] | None:
    """Write ``df`` as one Parquet file (pyarrow's writer) and commit it to the Delta table.

    The file is written by pyarrow (no statistics, an encoding per column, `_parquet_layout`:
    several times faster than delta-rs' writer at 1M units x 14 columns), fsynced, hashed
    as stored (`_hash_fd`), then added to the table by a Delta commit
    (``mode``: ``"append"`` or ``"overwrite"``; a new table is created). Returns the table's
    new version and ``[[path, size, digest]]`` of the file, or ``None`` (nothing written) when
    the table's schema differs from ``df``'s: the caller then writes through delta-rs, which
    merges or replaces the schema.
    """
    dl = _deltalake()
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction, create_table_with_add_actions

    schema = dl.Schema.from_arrow(df.head(0).to_arrow().schema)
    exists = (table / "_delta_log").is_dir()
    dt = dl.DeltaTable(str(table)) if exists else None
    if dt is not None and dt.schema() != schema:
        return None
    table.mkdir(mode=0o700, exist_ok=True)
    name = f"part-00000-{uuid.uuid4()}-c000.parquet"  # an encoding per column
    path = table / name
    # created here (never an existing file), then written by pyarrow's own file writer: at
    # 10M units x 14 columns a Python file object took about 30,000 calls per file, each
    # copying a page into a new bytes object (0.3-0.5 CPU-s per file)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        # the columns without nulls written as required fields: no definition levels to
        # encode (or decode), 0.07 CPU-s per column at 10M units; the same values, and the
        # Delta schema (nullable) unchanged
        data = df.to_arrow()
        data = data.cast(pa.schema([f.with_nullable(df[f.name].null_count() > 0)
                                    for f in data.schema]))
        # written through this descriptor's own file (Linux: its /proc link opens the same
        # file whatever the name points to now), so the bytes never go anywhere else
        proc = f"/proc/self/fd/{fd}"
        pq.write_table(data, proc if os.path.exists(proc) else str(path), **_parquet_layout(df))
        os.fsync(fd)
        # the Delta commit names the file: the name must still be the file created above (not
        # a link or another file put there meanwhile; elsewhere than Linux pyarrow also wrote
        # by that name), or what was written, synced and hashed is not what the name reads
        mine, now = os.fstat(fd), os.lstat(path)
        if (mine.st_dev, mine.st_ino) != (now.st_dev, now.st_ino) or not stat.S_ISREG(now.st_mode):
            raise LedgerError(
                f"the ledger file {path} was replaced while this run wrote it (another process "
                "writes in the ledger's folder); nothing was committed.\nHint: make sure only "
                "the curator's runs can write the ledger's folder, then run again.")
        # hashed as stored (the bytes every later open hashes), after the fsync
        size, digest = _hash_fd(fd)
    finally:
        os.close(fd)
    u = df["unit"]
    stats = {"numRecords": df.height, "nullCount": {"unit": u.null_count()}}
    if df.height > u.null_count():
        stats |= {"minValues": {"unit": u.min()}, "maxValues": {"unit": u.max()}}
    add = AddAction(name, size, {}, int(_dt.datetime.now(_dt.UTC).timestamp() * 1000),
                    True, json.dumps(stats))
    if dt is None:
        create_table_with_add_actions(str(table), schema, [add], mode="error")
    else:
        dt.create_write_transaction([add], mode=mode, schema=schema)
    version = int(dl.DeltaTable(str(table)).version())
    return version, [[f"{table.name}/{name}", size, digest]]


def _table_files(table: Path) -> set[str]:
    if not (table / "_delta_log").is_dir():
        return set()
    DeltaTable = _deltalake().DeltaTable

    dt = DeltaTable(str(table))
    return _rel_files(table, dt.file_uris())


def _head_files(table: Path, skip: set[str] | None = None) -> tuple[int, list[list[Any]]]:
    """The table's version and ``[path, size, digest]`` of its files (except ``skip``)."""
    DeltaTable = _deltalake().DeltaTable

    dt = DeltaTable(str(table))
    files = []
    base = os.path.realpath(table.parent)
    for u in sorted(dt.file_uris()):
        p = Path(_uri_path(u))
        rel = os.path.relpath(p, base)
        if skip and rel in skip:
            continue
        _, n, h = _read_hashed(p, "" if _blake3() is None else _BLAKE3, table.parent)
        files.append([rel, n, h])
    return int(dt.version()), files


def _vacuum(table: Path) -> None:
    DeltaTable = _deltalake().DeltaTable

    # the vacuum writes log entries of its own: owner-only from the start, so that a run
    # killed before the `_private` that follows leaves no file an open refuses as loose
    with contextlib.suppress(Exception), _owner_only_files():
        DeltaTable(str(table)).vacuum(retention_hours=0, enforce_retention_duration=False,
                                      dry_run=False)


def iter_show(entries: list[dict[str, Any]]) -> Iterator[str]:
    """Lines describing a chain (for ``tabdp ledger show``).

    Example:
        >>> e = {"seq": 0, "series": "s", "series_id": "ab", "created": "t", "hash": "h" * 64,
        ...      "lifetime_budget": 1.0}
        >>> next(iter_show([e]))
        "series 's' (id ab), lifetime budget 1.0, 0 release(s)"
    """
    from tabdp.planning import upper_3g

    g = entries[0]
    yield (f"series {g['series']!r} (id {g['series_id']}), lifetime budget "
           f"{g['lifetime_budget']}, {len(entries) - 1} release(s)")
    for e in entries[1:]:
        units = (e.get("history") or {}).get("units", 0)
        total = (e.get("state") or {}).get("units", 0)
        curve = ("not recorded" if e.get("public_curve") is None else
                 "recorded (" + ", ".join(
                     f"{r['delta']:g}: {upper_3g(r['rho'])}" if r["rho"] is not None
                     else f"{r['delta']:g}: inf" for r in _spread_rows(
                         e["public_curve"]["total"])) + ")")
        yield (f"  #{e['seq']:<4} {e['created']}  label={e.get('label')!s:<12} "
               f"release={e.get('release', e.get('label'))!s:<12} curve={curve} "
               f"units charged={units:<10} units in ledger={total:<10} "
               f"spec={str(e.get('spec_hash'))[:12]} manifest="
               f"{str(e.get('manifest_hash'))[:12]} entry={e['hash'][:16]}")


def _spread_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At most four of a curve's rows (``tabdp ledger show``), spread over its sizes."""
    keep = set(_spread([r["delta"] for r in rows]))
    return [r for r in rows if r["delta"] in keep]


def _finite(x: float) -> bool:
    return math.isfinite(x)
