"""The row counts of a Parquet file's row groups, read from its footer (no data is read).

Polars reads a file batch by batch with ``collect_batches``, but its streaming engine decodes
several row groups ahead of the reader and keeps them (about 120 MB of a 10M-row
per-record report's four loss columns); a slice of the file that covers whole row groups is
decoded once and freed before the next (docs/performance.md, "Stop 66"). Polars does not
tell where a file's row groups start, so the footer's ``FileMetaData`` (Thrift's compact
protocol) is read here: field 4, ``row_groups``, and in each ``RowGroup`` field 3,
``num_rows``; every other field is skipped by its type.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

__all__ = ["row_group_rows"]

_MAGIC = b"PAR1"
#: Compact protocol types: bool true/false, byte, i16, i32, i64, double, binary, list, set,
#: map, struct.
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)


class _Reader:
    """A cursor over the footer's bytes (Thrift's compact protocol)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def byte(self) -> int:
        b = self.data[self.at]
        self.at += 1
        return b

    def varint(self) -> int:
        out = shift = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def zigzag(self) -> int:
        v = self.varint()
        return (v >> 1) ^ -(v & 1)

    def fields(self) -> Iterator[tuple[int, int]]:
        """The fields of a struct, as ``(id, type)``, up to its stop byte."""
        last = 0
        while True:
            head = self.byte()
            kind = head & 0x0F
            if kind == 0:
                return
            delta = head >> 4
            last = last + delta if delta else self.zigzag()
            yield last, kind

    def list_head(self) -> tuple[int, int]:
        head = self.byte()
        size = head >> 4
        return (self.varint() if size == 15 else size), head & 0x0F

    def skip(self, kind: int, in_list: bool = False) -> None:
        if kind in (_TRUE, _FALSE):
            self.at += 1 if in_list else 0  # a field's value is in its type; a list's a byte
        elif kind == _BYTE:
            self.at += 1
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.at += 8
        elif kind == _BINARY:
            n = self.varint()
            self.at += n
        elif kind in (_LIST, _SET):
            n, elem = self.list_head()
            for _ in range(n):
                self.skip(elem, True)
        elif kind == _MAP:
            n = self.varint()
            if n:
                kv = self.byte()
                for _ in range(n):
                    self.skip(kv >> 4, True)
                    self.skip(kv & 0x0F, True)
        elif kind == _STRUCT:
            for _, k in self.fields():
                self.skip(k)
        else:
            raise ValueError(f"unknown Thrift compact type {kind}")


def row_group_rows(path: str | os.PathLike[str]) -> list[int] | None:
    """The number of rows of each row group of a Parquet file, in order.

    Args:
        path: A Parquet file.

    Returns:
        One count per row group, or None where the footer cannot be read as expected (the
        caller then reads the file another way).

    Example:
        >>> import polars as pl, tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.parquet"
        >>> pl.DataFrame({"x": range(10)}).write_parquet(p, row_group_size=4)
        >>> row_group_rows(p)
        [4, 4, 2]
    """
    try:
        with open(path, "rb") as f:
            f.seek(-8, os.SEEK_END)
            tail = f.read(8)
            if tail[4:] != _MAGIC:
                return None
            (size,) = struct.unpack("<I", tail[:4])
            f.seek(-8 - size, os.SEEK_END)
            r = _Reader(f.read(size))
        rows: list[int] | None = None
        for fid, kind in r.fields():
            if fid == 4 and kind == _LIST:
                n, elem = r.list_head()
                if elem != _STRUCT:
                    return None
                rows = []
                for _ in range(n):
                    got = None
                    for gid, gkind in r.fields():
                        if gid == 3 and gkind == _I64:
                            got = r.zigzag()
                        else:
                            r.skip(gkind)
                    if got is None or got < 0:
                        return None
                    rows.append(got)
            else:
                r.skip(kind)
        return rows
    except (OSError, ValueError, IndexError, struct.error):
        return None
