"""The anchor of a lifetime ledger: its chain head, kept outside the ledger folder.

A ledger's chain proves that no release was altered, removed or reordered *inside* the folder,
but an older copy of the whole folder (state, history and chain, all consistent) is an intact
ledger too: putting it back would erase the releases since from every unit's lifetime loss.
The anchor, ``<parent>/.<name>.head.json`` next to the folder (owner-only, 0600), records the
series id, the number of chain entries and the hash of the last one. It is rewritten
atomically (temporary file, fsync, rename, fsync of the folder) right after each chain entry
is committed, and checked at every open: a ledger whose chain is shorter than the anchor's,
does not hold the anchor's head at the anchor's position, or is of another series is refused.

Crash ordering: the chain entry is committed (and synced) first, the anchor second. A process
killed between the two leaves the anchor one entry behind, its head equal to the chain's
previous entry: that state is accepted and the anchor brought up to date. A missing anchor is
written only for a chain without releases; with a release, the folder could be an older copy
and is refused like one. Anything else that does not match is refused, until the curator
accepts the folder as it is
(``tabdp ledger accept-restore``, ``Ledger.open(path, accept_restore=True)``).

The anchor is evidence against accidental or naive restores (a backup of the ledger folder put
back), not against someone who can replace both the folder and the anchor.

Example:
    >>> import pathlib
    >>> anchor_path(pathlib.Path("/srv/ledgers/cbp")).as_posix()
    '/srv/ledgers/.cbp.head.json'
"""

from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import re
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabdp._durable import fsync_dir
from tabdp.exceptions import LedgerAnchorError, LedgerError

__all__ = ["ANCHOR_FORMAT", "Anchor", "anchor_path", "read_anchor", "check_anchor", "fsync_dir",
           "write_anchor"]

#: The format written in every anchor.
ANCHOR_FORMAT = "tabdp-ledger-anchor/1"
_HEX64 = re.compile(r"[0-9a-f]{64}")

#: What `check_anchor` found: the anchor matches, is missing, is one entry behind (a run
#: killed between its commit and the anchor's write), or does not match and is accepted.
OK, MISSING, BEHIND, ACCEPTED = "ok", "missing", "behind", "accepted"


@dataclass(frozen=True)
class Anchor:
    """What an anchor records.

    Attributes:
        series_id: The series' random id (chain genesis ``series_id``).
        entries: Number of chain entries (genesis included: releases + 1).
        head: SHA-256 of the chain's last entry (its ``hash``).

    Example:
        >>> Anchor("ab", 3, "0" * 64).releases
        2
    """

    series_id: str
    entries: int
    head: str

    @property
    def releases(self) -> int:
        """Releases the anchor records (entries after the genesis).

        Example:
            >>> Anchor("ab", 1, "0" * 64).releases
            0
        """
        return self.entries - 1


def anchor_path(root: Path) -> Path:
    """Where the anchor of the ledger folder ``root`` is: ``<parent>/.<name>.head.json``.

    Example:
        >>> anchor_path(Path("l")).name
        '.l.head.json'
    """
    root = Path(os.path.abspath(root))  # "l", "./l" and "a/../l" alike
    return root.parent / f".{root.name}.head.json"


def _fix(root: Path) -> str:
    return (f"if this folder is the ledger to keep (a deliberate restore: the releases it "
            f"lacks were never published), accept it with `tabdp ledger accept-restore {root}` "
            "(or tabdp.Ledger.open(path, accept_restore=True))")


def file_kind(mode: int) -> str:
    """What a file of ``mode`` (from ``lstat``) is, in words.

    Example:
        >>> import stat
        >>> file_kind(stat.S_IFIFO | 0o600), file_kind(stat.S_IFREG | 0o600)
        ('a FIFO (named pipe)', 'a regular file')
    """
    for test, words in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"),
                        (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                        (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device")):
        if test(mode):
            return words
    return "a special file"  # pragma: no cover - every POSIX type is named above


class NotRegularFile(OSError):
    """`open_regular`'s refusal: the path is ``kind`` (`file_kind`), not a regular file."""

    def __init__(self, kind: str) -> None:
        """The refusal of a path that is ``kind``."""
        super().__init__(kind)
        self.kind = kind


def open_regular(path: Path, flags: int, mode: int = 0o600) -> int:
    """``os.open`` of a file that must be a regular file, never through a link.

    Checked with ``lstat`` before it is opened (a FIFO or a device is never opened), opened
    non-blocking (a FIFO swapped in meanwhile cannot hang the open) and checked again on the
    open descriptor.

    Raises:
        NotRegularFile: ``path`` is a symbolic link, a folder, a FIFO, a socket or a device.
        FileNotFoundError: ``path`` is missing and ``flags`` do not create it.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> os.mkfifo(d / "f")
        >>> open_regular(d / "f", os.O_RDONLY)
        Traceback (most recent call last):
        ...
        tabdp.privacy._anchor.NotRegularFile: a FIFO (named pipe)
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(file_kind(st.st_mode))
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0),
                     mode)
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise
        raise NotRegularFile("a symbolic link" if err.errno == errno.ELOOP
                             else file_kind(os.lstat(path).st_mode)) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # swapped in between the lstat and the open
        os.close(fd)
        raise NotRegularFile(file_kind(st.st_mode))
    return fd


def read_anchor(root: Path) -> Anchor | None:
    """The anchor of the ledger ``root``, or ``None`` when there is none.

    Raises:
        LedgerAnchorError: The anchor is a symbolic link or not a regular file (never
            opened then: a FIFO could block), or does not parse as an anchor.

    Example:
        >>> import tempfile
        >>> read_anchor(Path(tempfile.mkdtemp()) / "ledger") is None
        True
    """
    p = anchor_path(root)
    try:  # a FIFO or a device is never opened (it could block), nor opened blocking
        fd = open_regular(p, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except NotRegularFile as err:
        link = err.kind == "a symbolic link"
        kind = err.kind if link else f"{err.kind}, not a regular file"
        raise LedgerAnchorError(
            f"the ledger {root} does not verify against its anchor: the anchor {p} is {kind}"
            " (the anchor must be a file of its own, owner-only). Nothing was opened through "
            f"it.\nHint: remove {'the link' if link else f'it (rm {p})'} and put back the "
            f"anchor file; {_fix(root)}.") from None
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(1 << 16)
    try:
        obj = json.loads(raw)
        anchor = Anchor(obj["series_id"], obj["entries"], obj["head"])
        ok = (obj.get("format") == ANCHOR_FORMAT and isinstance(anchor.series_id, str)
              and type(anchor.entries) is int and anchor.entries >= 1
              and isinstance(anchor.head, str) and _HEX64.fullmatch(anchor.head) is not None)
    except (ValueError, UnicodeDecodeError, KeyError, TypeError):
        ok = False
    if not ok:
        raise LedgerAnchorError(
            f"the ledger {root} does not verify against its anchor: the anchor {p} is not a "
            f"{ANCHOR_FORMAT} file (altered or replaced).\nHint: put back the anchor file; "
            f"{_fix(root)}.")
    return anchor


def check_anchor(root: Path, entries: list[dict[str, Any]], *,
                 accept_restore: bool = False) -> tuple[str, Anchor | None]:
    """Compare a verified chain with the ledger's anchor.

    Args:
        root: The ledger folder.
        entries: Its chain entries, verified (genesis first).
        accept_restore: Accept a chain that does not match (the curator's deliberate
            restore) instead of refusing it.

    Returns:
        ``(status, anchor)``: ``"ok"`` (the anchor records this chain's head), ``"missing"``
        (no anchor, and no release in the chain), ``"behind"`` (one entry behind, at the
        chain's previous entry: a run killed between its commit and the anchor's write) or
        ``"accepted"``; and the anchor
        read (``None`` if missing or unreadable and accepted).

    Raises:
        LedgerAnchorError: The chain is shorter than the anchor's, does not hold the
            anchor's head where the anchor records it, is of another series, the anchor is
            more than one entry behind, or missing while the chain holds a release (and
            ``accept_restore`` is off).

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp()) / "ledger"
        >>> chain = [{"series_id": "ab", "hash": "1" * 64}]
        >>> check_anchor(root, chain)[0]
        'missing'
        >>> write_anchor(root, chain)
        >>> check_anchor(root, chain)[0]
        'ok'
        >>> check_anchor(root, [*chain, {"series_id": "ab", "hash": "2" * 64}])[0]
        'behind'
        >>> anchor_path(root).unlink()                       # lost, with a release in the chain
        >>> check_anchor(root, [*chain, {"series_id": "ab", "hash": "2" * 64}])
        Traceback (most recent call last):
        ...
        tabdp.exceptions.LedgerAnchorError: the ledger ... has no anchor ...
    """
    try:
        anchor = read_anchor(root)
    except LedgerAnchorError:
        if accept_restore:
            return ACCEPTED, None
        raise
    n = len(entries)
    if anchor is None:
        if n <= 1:  # no release yet: no older copy can erase one
            return MISSING, None
        if accept_restore:
            return ACCEPTED, None
        raise LedgerAnchorError(
            f"the ledger {root} has no anchor ({anchor_path(root)}, the chain head kept next "
            f"to the folder) although it holds {n - 1} release(s): it was deleted or not "
            "copied with the folder, or the ledger was made by a version of tabdp that did "
            "not keep one. Without it, an older copy of the folder put back cannot be told "
            "from the newest one (it would erase the releases since from every unit's "
            "lifetime loss). It was refused before any data was read.\nHint: put back the "
            "anchor file; or check that `tabdp ledger show` ends with the chain head of the "
            f"series' last release (its confidential ledger.json), then {_fix(root)}.")
    sid = entries[0]["series_id"]
    a = anchor
    if a.series_id == sid:
        if a.entries == n and entries[n - 1]["hash"] == a.head:
            return OK, a
        if a.entries == n - 1 and entries[n - 2]["hash"] == a.head:
            return BEHIND, a
    if accept_restore:
        return ACCEPTED, a
    where = anchor_path(root)
    found = f"the folder holds {n - 1} release(s), chain head {entries[-1]['hash'][:16]}…"
    recorded = f"the anchor {where} records {a.releases} release(s), chain head {a.head[:16]}…"
    if a.series_id != sid:
        what = (f"the anchor is of another release series (id {a.series_id}; the folder's "
                f"series {entries[0].get('series')!r} has id {sid}): another ledger was put in "
                "this one's place, which would account other units' losses")
        fix = "put back this series' ledger folder"
    elif a.entries > n:
        what = (f"{recorded}; {found}: an older copy of the ledger folder was put back, "
                f"which would erase the {a.entries - n} release(s) since from every unit's "
                "lifetime loss")
        fix = ("put back the newest copy of the ledger folder (the one whose `tabdp ledger "
               f"show` ends with chain head {a.head[:16]}…, the head of the last release's "
               "confidential ledger.json)")
    elif entries[a.entries - 1]["hash"] != a.head:
        what = (f"{recorded}, but the folder's chain entry {a.entries - 1} is another one; "
                f"{found}: the folder is a copy of the ledger that went on from an earlier "
                "release (an older copy put back, then new releases), whose releases since "
                "that point are missing from every unit's lifetime loss")
        fix = ("put back the copy of the ledger folder that holds the anchor's head, or the "
               "newest one")
    else:
        what = (f"{recorded}; {found}: the anchor is older than the folder (an old anchor put "
                "back, or releases committed by a version of tabdp that did not keep it)")
        fix = "put back the newest anchor file"
    raise LedgerAnchorError(
        f"the ledger {root} does not verify against its anchor: {what}. It was refused before "
        f"any data was read.\nHint: {fix}; {_fix(root)}.")


def write_anchor(root: Path, entries: list[dict[str, Any]],
                 accepted: dict[str, Any] | None = None) -> None:
    """Record the chain's head in the anchor, atomically (owner-only, synced).

    Args:
        root: The ledger folder (the anchor goes next to it).
        entries: Its chain entries (genesis first).
        accepted: The anchor this one replaces after an accepted restore (kept in it, for the
            curator's audit).

    Raises:
        LedgerError: The anchor cannot be written (the ledger's parent folder must be
            writable).

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp()) / "ledger"
        >>> write_anchor(root, [{"series_id": "ab", "series": "s", "hash": "1" * 64}])
        >>> oct(anchor_path(root).stat().st_mode & 0o777), read_anchor(root).releases
        ('0o600', 0)
    """
    p = anchor_path(root)
    root = Path(os.path.abspath(root))
    body: dict[str, Any] = {
        "format": ANCHOR_FORMAT, "ledger": root.name, "series": entries[0].get("series"),
        "series_id": entries[0]["series_id"], "entries": len(entries),
        "head": entries[-1]["hash"],
        "updated": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "note": "CONFIDENTIAL (the curator's). The head of the ledger's chain: a ledger folder "
                "that does not hold it is refused. Never publish the head (it hashes "
                "confidential files)."}
    if accepted is not None:
        body["accepted_restore"] = accepted
    tmp = p.parent / f".{root.name}.head.{uuid.uuid4().hex}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, json.dumps(body, indent=1, sort_keys=True).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, p)  # a link at p is replaced, never followed
        fsync_dir(p.parent)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise LedgerError(
            f"cannot write the anchor of the ledger {root} at {p} ({err.strerror or err}); "
            "the anchor (the chain head, kept next to the ledger folder) needs its parent "
            f"folder {p.parent} to be writable by the curator.\nHint: make {p.parent} "
            "writable, or keep the ledger in a folder of its own the curator can write "
            "(e.g. ledgers/<series>).") from None
