"""A ledger data file replaced between its creation and pyarrow's write is never committed."""

from __future__ import annotations

import os

import polars as pl
import pytest

pytest.importorskip("deltalake")


def test_a_file_swapped_for_a_link_while_written_is_refused(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from tabdp.exceptions import LedgerError
    from tabdp.privacy.lifetime import _write_delta

    outside = tmp_path / "outside.parquet"
    outside.write_bytes(b"")
    real = pq.write_table

    def swapped(data, where, **kwargs):  # another writer replaces the name with a link
        [name] = table.glob("part-*.parquet")
        os.unlink(name)
        os.symlink(outside, name)
        return real(data, where, **kwargs)

    monkeypatch.setattr(pq, "write_table", swapped)
    table = tmp_path / "ledger" / "state"
    table.parent.mkdir(mode=0o700)
    with pytest.raises(LedgerError, match="replaced"):
        _write_delta(table, pl.DataFrame({"unit": [1, 2], "rho": [0.25, 0.5]}), "overwrite")
    assert not (table / "_delta_log").exists()  # nothing committed
    if os.path.exists("/proc/self/fd"):  # written through the descriptor: nothing went outside
        assert outside.read_bytes() == b""


def test_the_digest_is_the_stored_files(tmp_path):
    from tabdp.privacy.lifetime import _read_hashed, _write_delta

    table = tmp_path / "ledger" / "state"
    table.parent.mkdir(mode=0o700)
    _, [[rel, size, digest]] = _write_delta(
        table, pl.DataFrame({"unit": [1, 2], "rho": [0.25, None]}), "overwrite")
    _, n, h = _read_hashed(table.parent / rel, digest, table.parent)
    assert (n, h) == (size, digest)
