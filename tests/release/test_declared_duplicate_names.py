"""Review rev65p: a data file holding a column name twice no longer stops an author-mode run.

Parquet allows two columns of one name (pyarrow writes them; a pandas frame with a repeated
column name is stored so). Polars refuses such a file outright (``DuplicateError``, even for
its other columns), so one such file, which can hold one record, stopped every author-mode
run over the dataset (exit 4) where its neighbour without it ran: an oracle on the data, of
the kind stop 64 closed for a column's twin in letter case. A declared column held twice is
now null in that file (counted in ``input_rules.declared_nulls``, as a column the engine
cannot read); the file's other columns are read as in any file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_author_attacks import (  # noqa: E402
    R12_SPEC,
    _r12_neighbours,
    _r12_run,
    _r12_servers,
)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

INTS = {"estab_id": "Int64", "state": "String", "v": "Int64"}

#: D' adds this file (estab 1000 in state 02): a name held twice, declared or not.
_FILES = {
    "declared twice": (["estab_id", "state", "v", "v"], [[1000], ["02"], [5], [6]]),
    "undeclared twice": (["estab_id", "state", "v", "x", "x"], [[1000], ["02"], [5], [1], [2]]),
    "text twice": (["estab_id", "state", "state", "v"], [[1000], ["02"], ["01"], [5]]),
    # a declared column stored as a struct holding a field name twice (Polars: "duplicate
    # struct field" on any expression reading it), alone and in a file with a name twice
    "struct field twice": (["estab_id", "state", "v"], [[1000], ["02"], "struct"]),
    "struct field twice, name twice": (["estab_id", "state", "v", "x", "x"],
                                       [[1000], ["02"], "struct", [1], [2]]),
}


def _servers(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    servers = _r12_servers(tmp_path, INTS, None, seeded=True)
    names, values = _FILES[kind]
    columns = [pa.StructArray.from_arrays([pa.array([5]), pa.array([6])], names=["a", "a"])
               if v == "struct" else pa.array(v, pa.int64() if isinstance(v[0], int)
                                                  else pa.string())
               for v in values]
    pq.write_table(pa.table(columns, names=names), servers[0] / "ds" / "s03.parquet")
    return servers


def _declared_nulls(server: Path) -> dict[str, int]:
    conf = server / "releases" / "r12" / "confidential" / "confidential.json"
    return json.loads(conf.read_text())["input_rules"]["declared_nulls"]


@pytest.mark.parametrize("kind", list(_FILES))
def test_a_file_with_a_name_twice_runs_as_its_neighbour(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    servers = _servers(tmp_path, kind)
    tables = _r12_neighbours(servers, monkeypatch)  # exit 0, same stdout/stderr, public alike
    nulls = [_declared_nulls(s) for s in servers]
    assert nulls[1] == {"estab_id": 0, "state": 0, "v": 0}
    if kind == "undeclared twice":  # the file's declared columns are read: v = 5 is in
        assert nulls[0] == nulls[1]
        assert round(tables[0]["estimate"][1] - tables[1]["estimate"][1], 6) == 5.0
    else:  # the column held twice is null in that file (then dropped): equal estimates
        twice = "state" if kind == "text twice" else "v"
        assert nulls[0] == {**nulls[1], twice: 1}
        assert tables[0].equals(tables[1])


def test_scan_declared_reads_the_other_columns_of_such_a_file(tmp_path: Path) -> None:
    from tabdp.release.declared import LOST, file_plans, scan_declared

    pq.write_table(pa.table([[1], ["é"], [2.5], [3], [4]],
                            names=["id", "name", "v", "v", "w"]), tmp_path / "a.parquet")
    schema: dict[str, Any] = {"id": pl.Int64, "name": pl.String, "v": pl.Float64,
                              "w": pl.Int64}
    (_, plan), = file_plans(tmp_path, schema)
    assert plan["v"][0] == "unreadable" and plan["w"] == ("column", pl.Int64)
    got = scan_declared(tmp_path, schema, flag_lost=True).collect()
    assert got.select(list(schema)).rows() == [(1, "é", None, 4)]
    assert got.select(LOST + c for c in schema).rows() == [(False, False, True, False)]
    assert scan_declared(tmp_path, schema, schema_only=True).collect_schema() == pl.Schema(
        schema)


@pytest.mark.spark
def test_spark_reads_such_a_file_as_polars_does(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a name held twice, and a declared column's twin in letter case held twice ('V', 'V')
    servers = _servers(tmp_path, "declared twice")
    text = R12_SPEC.format(extra="[randomness]\nseed = 7")
    views = [_r12_run(s, monkeypatch, text, "--test-seed", "--engine", "spark")
             for s in servers]
    assert views[0][0] == 0, views[0]
    assert views[0] == views[1]
    assert _declared_nulls(servers[0])["v"] == 1
    pq.write_table(pa.table([[1000], ["02"], [5], [6], [7]],
                            names=["estab_id", "state", "v", "V", "V"]),
                   servers[0] / "ds" / "s03.parquet")
    again = _r12_run(servers[0], monkeypatch, text, "--test-seed", "--engine", "spark")
    assert again == views[1]
    assert _declared_nulls(servers[0])["v"] == 1
