"""The row counts of a Parquet file's row groups, read from its footer (no data is read).

Polars reads a file batch by batch with ``collect_batches``, but its streaming engine decodes
several row groups ahead of the reader and keeps them (about 120 MB of a 10M-row
per-record report's four loss columns); a slice of the file that covers whole row groups is
decoded once and freed before the next (docs/performance.md, "Stop 66"). Polars does not
tell where a file's row groups start, so the footer is read with pyarrow (a core
dependency), as `tabdp.release.declared` reads footers.
"""

from __future__ import annotations

import os

__all__ = ["row_group_rows"]


def row_group_rows(path: str | os.PathLike[str]) -> list[int] | None:
    """The number of rows of each row group of a Parquet file, in order.

    Args:
        path: A Parquet file.

    Returns:
        One count per row group, or None where the footer cannot be read (the caller then
        reads the file another way).

    Example:
        >>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.parquet"
        >>> pq.write_table(pa.table({"x": range(10)}), p, row_group_size=4)
        >>> row_group_rows(p)
        [4, 4, 2]
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(os.fspath(path))
    except (OSError, pa.ArrowException):
        return None
    return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
