r"""Files and folders made durable before a commit point relies on them (fsync).

Shared by the lifetime ledger (its chain, its anchor) and the release's staging (its swap
records and carried-names files, and every file and folder it staged, `sync_tree`): one way to
write a small file on disk, one way to make a folder's entries durable, and one way to put a
whole folder on disk.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> write_synced(d / "r.json", '{"a": 1}\n')
    >>> (d / "r.json").read_text()
    '{"a": 1}\n'
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["fsync_dir", "sync_tree", "write_synced"]


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


def sync_tree(path: Path) -> int:
    """Put a folder on disk: every file under it (fsync), then every folder, deepest first.

    A step that must imply the folder's content is on disk (a commit point, a rename into
    place) comes after this: a file's data is synced before the folder that names it, a
    subfolder before its parent, ``path`` itself last. Regular files only: a link is not
    followed (its entry is synced with its folder) and nothing else (a pipe, a device) is
    opened. Folders are synced strictly on POSIX; where a folder cannot be opened (Windows),
    its files still are.

    Args:
        path: The folder.

    Returns:
        The number of files and folders synced.

    Raises:
        OSError: A file or folder could not be read or synced (the first error).

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> (d / "sub").mkdir()
        >>> _ = (d / "a.parquet").write_bytes(b"x")
        >>> _ = (d / "sub" / "b.json").write_text("{}")
        >>> sync_tree(d)  # two files, two folders
        4
    """
    posix = os.name == "posix"
    # a file opened for reading can be fsynced on POSIX; Windows' flush needs write access
    flags = (os.O_RDONLY if posix else os.O_RDWR) | getattr(os, "O_NOFOLLOW", 0)
    flags |= getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    count = 0

    def fail(err: OSError) -> None:
        raise err

    # bottom-up: a folder's files and subfolders are synced before the folder itself
    for folder, _dirs, files in os.walk(path, topdown=False, onerror=fail, followlinks=False):
        for name in files:
            file = os.path.join(folder, name)
            if not stat.S_ISREG(os.lstat(file).st_mode):
                continue
            fd = os.open(file, flags)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            count += 1
        fsync_dir(Path(folder), strict=posix)
        count += 1
    return count
