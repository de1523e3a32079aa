r"""Files and folders made durable before a commit point relies on them (fsync).

Shared by the lifetime ledger (its chain, its anchor) and the release's staging (its swap
records and carried-names files): one way to write a small file on disk, and one way to make a
folder's entries durable.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> write_synced(d / "r.json", '{"a": 1}\n')
    >>> (d / "r.json").read_text()
    '{"a": 1}\n'
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_dir", "write_synced"]


def fsync_dir(path: Path, *, strict: bool = True) -> None:
    """Make a folder's entries (a rename or a new file in it) durable.

    Args:
        path: The folder.
        strict: Raise the ``OSError`` of a folder that cannot be opened or synced (not
            POSIX); otherwise go on without.

    Example:
        >>> import tempfile, pathlib
        >>> fsync_dir(pathlib.Path(tempfile.mkdtemp()))
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        if strict:
            raise
        return
    try:
        os.fsync(fd)
    except OSError:
        if strict:
            raise
    finally:
        os.close(fd)


def write_synced(path: Path, text: str, *, exclusive: bool = False) -> None:
    """Write a small owner-only (0600) text file and sync it to disk.

    Args:
        path: The file.
        text: Its content (UTF-8).
        exclusive: A new file only, never through a link at its name (``O_EXCL``,
            ``O_NOFOLLOW``): ``FileExistsError`` if the name is taken.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "x"
        >>> write_synced(p, "1", exclusive=True)
        >>> try:
        ...     write_synced(p, "2", exclusive=True)
        ... except FileExistsError:
        ...     print("taken")
        taken
    """
    flags = os.O_WRONLY | os.O_CREAT
    flags |= (os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)) if exclusive else os.O_TRUNC
    with os.fdopen(os.open(path, flags, 0o600), "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
