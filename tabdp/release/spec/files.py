"""The public files a spec names, and how they are found and read.

Paths are resolved against the spec's folder; in author mode, plain names are looked up in the
curator's public folders. Metadata files (domains, hierarchies, allowed keys) are read here.
"""

from __future__ import annotations

import contextvars
import errno
import io
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from tabdp.release.curator_config import CuratorConfig
from tabdp.release.spec.schema import _FRAME_SUFFIXES, _fail, _maybe, _names, _string

# -- files --------------------------------------------------------------------------------------
#: Author mode: the curator's configuration, and the declared name of every public file found
#: (messages show the name, never the server path). Set by :func:`parse_spec` for one parse.
_AUTHOR: contextvars.ContextVar[tuple[CuratorConfig, dict[Path, str]] | None] = \
    contextvars.ContextVar("_AUTHOR", default=None)
_PLAIN_NAME_BAD = set("/\\*?[]{}\x00")
#: Author mode: every public file found (its real path) -> the name the spec gave, the real
#: path of its public folder. Every read of such a file, at parse and at run time, opens it
#: again below that folder without following any link (`_public_bytes`): a name checked once
#: and swapped for a link to the data afterwards is never read (review rev62a).
_VERIFIED: dict[Path, tuple[str, Path]] = {}


def _shown(file: Path) -> str:
    """How a message shows a metadata file: its declared name in author mode, else its path."""
    ctx = _AUTHOR.get()
    if ctx is not None:
        return ctx[1].get(file, "<a file of the curator's public folders>")
    return str(file)


def _resolve(base: Path, text: str) -> Path:
    p = Path(text).expanduser()
    if not p.is_absolute():
        p = base / p
    return Path(os.path.normpath(p))


def _plain_name(text: str, path: str, what: str) -> None:
    """Author mode: a metadata file is named by its plain file name (decided from the text)."""
    bad = (not text or text in (".", "..") or text.startswith("~") or ".." in text
           or any(ch in _PLAIN_NAME_BAD for ch in text) or re.match(r"^[A-Za-z]:", text)
           or any(ord(ch) < 32 for ch in text))
    if bad:
        _fail(path, f"in author mode (input.mode = \"author\") a {what} file is named by its "
                    f"plain file name, looked up in the curator's public folders; got "
                    f"{text!r}, which is a path, a pattern or not a plain name (no '/', '\\', "
                    "'..', leading '~', drive letter, control character or glob character "
                    "* ? [ ] { }).",
              'write the file name only, e.g. file = "naics2.csv"; ask the curator to put '
              "the file in a public folder of the curator configuration.")


def _public_file(text: str, path: str, what: str, config: CuratorConfig) -> Path:
    """Author mode: the public metadata file ``text`` (a plain name) in the public folders.

    A file found in a public folder whose real location (symbolic links resolved) is outside
    that folder or inside a dataset root is refused, with the same message as a missing file:
    neither quotes a server path. So is a file with more than one hard link (``st_nlink >
    1``): a hard link has no real location to resolve, and its other name may be a dataset
    file (a confidential Parquet file linked into a public folder would otherwise be read as
    a key list).
    """
    _plain_name(text, path, what)
    roots = config.dataset_roots()
    for folder in config.public_folders:
        candidate = folder / text
        real = Path(os.path.realpath(candidate))
        top = Path(os.path.realpath(folder))
        if top not in real.parents or any(real == r or r in real.parents for r in roots):
            continue
        try:
            st = real.stat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            _VERIFIED[real] = (text, top)
            return real
    _fail(path, f"{what} file {text!r} is not in the curator's public folders (an author-mode "
                "spec names public metadata files only: domains, key lists, hierarchies).",
          "check the name, or ask the curator to publish the file in a public folder of the "
          "curator configuration.")


class _NotPublic(Exception):
    """A verified public file is no longer a plain file of its public folder."""


def _open_below(top: Path, parts: Sequence[str]) -> tuple[int, int]:
    """Open ``top/parts...`` read-only following no link at all (file and parent descriptors).

    The file must be a regular file: checked before it is opened (a device or FIFO is never
    opened) and again on the open descriptor (one swapped in meanwhile is closed and refused,
    ``OSError``), as `tabdp.privacy._anchor.open_regular` does for a single path.

    ``top`` is a real path (no link in it when it was checked): it is walked from ``/`` one
    component at a time too, so a folder on its way replaced by a link since is refused as
    well (review rev62b), not only a link below it.
    """
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    directory = getattr(os, "O_DIRECTORY", 0)
    if os.open not in os.supports_dir_fd or not nofollow:  # pragma: no cover - not POSIX
        return os.open(top.joinpath(*parts), os.O_RDONLY | getattr(os, "O_BINARY", 0)), -1
    names = [*top.parts[1:], *parts[:-1]]
    # O_PATH: a folder on the way needs only search permission (as a path lookup does)
    search = getattr(os, "O_PATH", os.O_RDONLY) | directory
    fd = os.open(top.anchor or "/", search)
    try:
        for part in names:
            inner = os.open(part, search | nofollow, dir_fd=fd)
            os.close(fd)
            fd = inner
        # not opened at all unless a regular file (review rev62b: opening a device can act,
        # a tape rewinds); O_NONBLOCK: a FIFO swapped in since opens at once (and is refused
        # by the caller's fstat), never blocks
        if not stat.S_ISREG(os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", parts[-1])
        out = os.open(parts[-1], os.O_RDONLY | nofollow | getattr(os, "O_NONBLOCK", 0),
                      dir_fd=fd)
        if not stat.S_ISREG(os.fstat(out).st_mode):  # swapped in between the stat and the open
            os.close(out)
            raise OSError(errno.EINVAL, "not a regular file", parts[-1])
        return out, fd
    except BaseException:
        os.close(fd)
        raise


def _public_bytes(file: Path) -> bytes | None:
    """The bytes of a public file found in author mode, read safely; ``None`` for other files.

    The file is opened below the real path of its public folder without following any link
    (nor any on the way to that folder), and must then be a regular file with one name
    (``st_nlink == 1``), and that name must still be it (same device and inode, one link, read
    by name after the open): what is read is the file that was checked, even if its name (or a
    folder on its way) was replaced since by a link to the data, and a hard link to a data
    file removed just after the open (its count then 1) is refused too (review rev62b).
    Raises `_NotPublic` otherwise.
    """
    entry = _VERIFIED.get(Path(file))
    if entry is None:
        return None
    top = entry[1]
    try:
        parts = Path(file).relative_to(top).parts
        fd, parent = _open_below(top, parts)
    except (OSError, ValueError):
        raise _NotPublic(entry[0]) from None
    try:
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if st.st_nlink != 1:  # (a regular file: `_open_below`)
                raise _NotPublic(entry[0])
            try:
                named = (os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
                         if parent >= 0 else os.stat(file, follow_symlinks=False))
            except OSError:
                raise _NotPublic(entry[0]) from None
            if (named.st_dev, named.st_ino) != (st.st_dev, st.st_ino) or named.st_nlink != 1:
                raise _NotPublic(entry[0])
            return fh.read()
    finally:
        if parent >= 0:
            os.close(parent)


def read_table_file(file: Path) -> pl.DataFrame:
    r"""Read a metadata file: CSV as text, else Parquet (an author-mode public file safely).

    Args:
        file: The file (a path the spec resolved).

    Returns:
        Its rows.

    Raises:
        SpecError: An author-mode public file that is no longer a plain file of its public
            folder (replaced by a link since the spec was read); the message names it as the
            spec did.

    Example:
        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "k.csv"
        >>> _ = f.write_text("code\n01\n")
        >>> read_table_file(f)["code"].to_list()
        ['01']
    """
    try:
        data = _public_bytes(file)
    except _NotPublic as err:
        _fail("", f"the public metadata file {err.args[0]!r} is no longer a file of the "
                  "curator's public folders (it was replaced since the spec was read).",
              "ask the curator to check the public folders; nothing was read from it.")
    source: Any = file if data is None else io.BytesIO(data)
    if Path(file).suffix.lower() == ".csv":
        return pl.read_csv(source, infer_schema=False)
    return pl.read_parquet(source)


def _file_path(value: Any, path: str, base: Path, what: str) -> Path:
    ctx = _AUTHOR.get()
    if ctx is not None:
        text = _string(value, path, what=f"the {what} file",
                       hint=f'the plain name of a public {what} file, e.g. file = "codes.csv".')
        file = _public_file(text, path, what, ctx[0])
        ctx[1][file] = text
        return file
    text = _string(value, path, what=f"the {what} file",
                   hint=f"give the path of a CSV or Parquet file ({what}), absolute or relative "
                        "to the spec's folder.")
    return _resolve(base, text)


def _read_frame(file: Path, path: str, what: str, written: str) -> pl.DataFrame:
    """Read a public metadata file (CSV as strings, or Parquet)."""
    if not file.is_file():
        _fail(path, f"{what} file not found: {written!r} (resolved to {_shown(file)!r}).",
              "fix the path; relative paths are resolved against the folder of the spec file.")
    suffix = file.suffix.lower()
    if suffix not in _FRAME_SUFFIXES:
        _fail(path, f"{what} file {_shown(file)!r} has suffix {suffix!r}; allowed: "
                    f"{_names(_FRAME_SUFFIXES)}.",
              "save it as CSV (read as text, so codes like '01' keep their zeros) or Parquet.")
    try:
        data = _public_bytes(file)
    except _NotPublic:
        _fail(path, f"{what} file {written!r} is not in the curator's public folders (an "
                    "author-mode spec names public metadata files only: domains, key lists, "
                    "hierarchies).",
              "check the name, or ask the curator to publish the file in a public folder of "
              "the curator configuration.")
    source: Any = file if data is None else io.BytesIO(data)
    try:
        if suffix == ".csv":
            return pl.read_csv(source, infer_schema=False)
        return pl.read_parquet(source)
    except (pl.exceptions.PolarsError, OSError, ValueError) as err:
        detail = f": {err}" if _AUTHOR.get() is None else " (not a CSV file with a header " \
            "row, nor a Parquet file)"
        _fail(path, f"cannot read {what} file {_shown(file)!r}{detail}",
              "fix the file (CSV with a header row, or Parquet).")


def _frame_column(frame: pl.DataFrame, column: str, path: str, file: Path) -> pl.Series:
    if column not in frame.columns:
        _fail(path, f"column {column!r} is not in {_shown(file)!r}; its columns are "
                    f"{_names(frame.columns)}.{_maybe(column, frame.columns)}",
              "fix the column name or the file.")
    return frame[column]


def align_keys(frame: pl.DataFrame, domains: Mapping[str, pl.Series]) -> pl.DataFrame:
    """Cast the columns of an allowed-keys frame to the types of their domains, if any.

    Args:
        frame: Keys read from a file (CSV columns are text).
        domains: The spec's domains.

    Returns:
        The frame with each column that has a domain cast (strictly) to the domain's type.

    Raises:
        polars.exceptions.PolarsError: A value does not convert.

    Example:
        >>> align_keys(pl.DataFrame({"year": ["2024"]}), {"year": pl.Series([2024])}).dtypes
        [Int64]
    """
    return frame.with_columns(pl.col(c).cast(domains[c].dtype, strict=True)
                              for c in frame.columns if c in domains)


def read_keys(file: Path, by: Sequence[str], domains: Mapping[str, pl.Series]) -> pl.DataFrame:
    r"""The allowed key combinations of a table, typed like the domains.

    Args:
        file: The keys file (validated by [`parse_spec`][tabdp.release.parse_spec]).
        by: The table's key columns (output order).
        domains: The spec's domains.

    Returns:
        The keys, columns in ``by`` order.

    Example:
        >>> import tempfile, pathlib
        >>> f = pathlib.Path(tempfile.mkdtemp()) / "k.csv"
        >>> _ = f.write_text("year,code\n2024,01\n")
        >>> read_keys(f, ["code", "year"], {"year": pl.Series([2024])}).row(0)
        ('01', 2024)
    """
    return align_keys(read_table_file(file), domains).select(list(by))
