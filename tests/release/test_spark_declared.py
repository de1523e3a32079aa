"""Spark author mode reads a declared dataset as the Polars engine does (issue 27, review R12).

``tabdp run --engine spark`` in author mode reads each data file on its own against the
declared schema (`tabdp.release.declared.read_declared_spark`, sharing `file_plans` with the
Polars engine): the same data files (chosen by name), the same partition values (each file's
own folders, typed by the declaration), a column Spark cannot read (``decimal256``, a
nanosecond timestamp) null in that file. Each test runs the Polars R12 neighbours (D and D',
one record apart) on Spark: the same exit code, stdout, stderr and public files but the noisy
columns, and the same public tables as the Polars engine (same test seed).
"""

from __future__ import annotations

import decimal
import json
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _curator import NOISY, write_curator  # noqa: E402
from test_author_attacks import HIER, R12_SPEC, _r12_run, _r12_servers  # noqa: E402

pytestmark = pytest.mark.spark


def _neighbours(servers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
                same_counts: bool = True) -> tuple[list[pl.DataFrame], list[dict[str, Any]]]:
    """Run R12_SPEC on both servers with each engine; Spark's views must match alike.

    On Spark: exit 0, stdout and stderr byte for byte on D and D', the same public file
    names and bytes (but tables and the manifest), the public tables equal but the noisy
    columns. On each server the Spark tables equal the Polars ones (same test seed) and the
    confidential ``input_rules`` are equal (``same_counts``: the ``declared_nulls`` too; a
    column only Polars reads is null on Spark). Returns the Spark tables and Spark
    ``input_rules`` of D and D'.
    """
    text = R12_SPEC.format(extra="[randomness]\nseed = 7")
    runs: dict[str, list[Any]] = {}
    tables: dict[str, list[pl.DataFrame]] = {}
    rules: dict[str, list[dict[str, Any]]] = {}
    for engine in ("polars", "spark"):
        runs[engine], tables[engine], rules[engine] = [], [], []
        for s in servers:
            runs[engine].append(_r12_run(s, monkeypatch, text, "--test-seed",
                                         "--engine", engine))
            pub = s / "releases" / "r12" / "public"
            tables[engine].append(pl.read_parquet(pub / "t.parquet"))
            conf = json.loads((s / "releases" / "r12" / "confidential" / "confidential.json")
                              .read_text())
            rules[engine].append(conf["input_rules"])
            if engine == "spark":
                runs[engine][-1] += (sorted(p.relative_to(pub).as_posix()
                                            for p in pub.rglob("*") if p.is_file()),
                                     {p.name: p.read_bytes() for p in pub.rglob("*")
                                      if p.is_file() and not p.name.endswith(
                                          (".parquet", "manifest.json", ".html", ".csv"))})
    spark = runs["spark"]
    assert spark[0] == spark[1], spark
    assert spark[0][0] == 0, spark[0]
    for s in servers:
        assert str(s) not in spark[0][1] + spark[0][2]
    a, b = tables["spark"]
    assert a.drop(NOISY, strict=False).equals(b.drop(NOISY, strict=False)), (a, b)
    for i in range(2):  # the engines agree, server by server
        assert tables["spark"][i].equals(tables["polars"][i]), (tables, i)
        pair = [dict(rules["spark"][i]), dict(rules["polars"][i])]
        if not same_counts:
            for r in pair:
                r.pop("declared_nulls")
        assert pair[0] == pair[1], rules
    return tables["spark"], rules["spark"]


INTS = {"estab_id": "Int64", "state": "String", "v": "Int64"}


def test_spark_float_file_for_an_integer_column(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """D' adds a pandas-written file whose ``v`` is float64 (5.0): read as the Int64 5."""
    pd = pytest.importorskip("pandas")
    with_, without = _r12_servers(tmp_path, INTS, None, seeded=True)
    (with_ / "ds" / "s03.parquet").unlink()
    pd.DataFrame({"estab_id": [1000], "state": ["02"], "v": [5.0]}).to_parquet(
        with_ / "ds" / "s03.parquet")
    tables, rules = _neighbours((with_, without), monkeypatch)
    assert round(tables[0]["estimate"][1] - tables[1]["estimate"][1], 6) == 5.0
    assert rules[0]["declared_nulls"] == {"estab_id": 0, "state": 0, "v": 0}


def test_spark_fraction_in_a_float_file_is_null_and_counted(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """D' adds a file whose ``v`` is 2.5 (float64): null, dropped, counted for the curator."""
    pa = pytest.importorskip("pyarrow")
    servers = _r12_servers(tmp_path, INTS, pa.array([2.5], pa.float64()), seeded=True)
    tables, rules = _neighbours(servers, monkeypatch)
    assert tables[0].equals(tables[1])
    assert rules[0]["declared_nulls"]["v"] == 1 and rules[1]["declared_nulls"]["v"] == 0


def test_spark_decimal256_file(spark: Any, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    """D' adds a file whose ``v`` is decimal256(40, 28), which Spark cannot read: null there."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    arr = pa.array([decimal.Decimal("5")], pa.decimal256(40, 28))
    probe = tmp_path / "probe.parquet"
    pq.write_table(pa.table({"v": arr}), probe)
    with pytest.raises(Exception, match="(?i)precision"):  # Spark's own read fails
        spark.read.parquet(str(probe)).collect()
    servers = _r12_servers(tmp_path, INTS, arr, seeded=True)
    tables, rules = _neighbours(servers, monkeypatch)
    assert tables[0].equals(tables[1])  # the record's v is null, then dropped
    assert rules[0]["declared_nulls"]["v"] == 1


def test_spark_decimal256_in_an_unused_declared_column(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The neighbour's extra file has ``flag`` (declared Boolean) as decimal256."""
    pa = pytest.importorskip("pyarrow")
    flag = pa.array([decimal.Decimal("2")], pa.decimal256(40, 28))
    servers = _r12_servers(tmp_path, {**INTS, "flag": "Boolean"}, None, {"flag": flag},
                           seeded=True)
    tables, _ = _neighbours(servers, monkeypatch)
    assert round(tables[0]["estimate"][1] - tables[1]["estimate"][1], 6) == 5.0


@pytest.mark.parametrize("unit,tz", [("ms", None), ("us", "UTC"), ("ns", None)])
def test_spark_datetime_unit_or_zone_differs_in_one_file(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unit: str,
        tz: str | None) -> None:
    """An unused declared Datetime column, written with another unit / zone by one file.

    Spark cannot read a nanosecond timestamp at all (``PARQUET_TYPE_ILLEGAL``): that column is
    null in that file, and the run goes on.
    """
    pa = pytest.importorskip("pyarrow")
    opened = pa.array([10**9], pa.timestamp(unit, tz=tz))
    servers = _r12_servers(tmp_path, {**INTS, "opened": "Datetime"}, None, {"opened": opened},
                           seeded=True)
    tables, rules = _neighbours(servers, monkeypatch, same_counts=unit != "ns")
    assert round(tables[0]["estimate"][1] - tables[1]["estimate"][1], 6) == 5.0
    assert rules[0]["declared_nulls"]["opened"] == (unit == "ns")


@pytest.mark.parametrize("other", ["notes.txt", "_SUCCESS", ".s03.parquet.crc", "_metadata",
                                   "sub/.hidden.parquet", "s03.csv"])
def test_spark_non_parquet_file_in_the_dataset_folder(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other: str) -> None:
    """The neighbour's folder also holds a file that is not a data file: never read."""
    servers = _r12_servers(tmp_path, INTS, None, seeded=True, other=other)
    assert (servers[0] / "ds" / other).exists()
    tables, _ = _neighbours(servers, monkeypatch)
    assert round(tables[0]["estimate"][1] - tables[1]["estimate"][1], 6) == 5.0


def _hive_servers(tmp_path: Path, folders: tuple[str, str], extra: str,
                  schema: dict[str, str], key_in_files: bool = False) -> tuple[Path, Path]:
    """D: ``ds/<folders[i]>/p.parquet`` for states 01 and 02 (10 records each).

    D' adds the record (estab 1000, state 02, v 5) at ``ds/<extra>``.
    """
    servers = []
    for name, with_extra in (("with", True), ("without", False)):
        root = tmp_path / name
        for i, (state, folder) in enumerate(zip(("01", "02"), folders, strict=True)):
            (root / "ds" / folder).mkdir(parents=True)
            part = pl.DataFrame({"estab_id": list(range(10 * i, 10 * i + 10)),
                                 "v": list(range(10))})
            part = part.with_columns(pl.lit("99" if key_in_files else state).alias("state"))
            part.write_parquet(root / "ds" / folder / "p.parquet")
        if with_extra:
            (root / "ds" / extra).parent.mkdir(parents=True, exist_ok=True)
            pl.DataFrame({"estab_id": [1000], "v": [5], "state": ["02"]}).write_parquet(
                root / "ds" / extra)
        write_curator(root, {"cbp": "ds"}, public=[HIER], seeded=True,
                      schemas={"cbp": schema})
        servers.append(root)
    return servers[0], servers[1]


def test_spark_size_band_folders_against_a_declared_integer(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``size=5-9`` folders against ``size`` declared Int64: null (counted), never a failure.

    The first file is in ``size=1``: typing the level from it (Spark's partition discovery,
    or the first file's levels) would make ``5-9`` fail or differ.
    """
    servers = _hive_servers(tmp_path, ("size=1", "size=5-9"), "size=5-9/x.parquet",
                            {**INTS, "size": "Int64"})
    tables, rules = _neighbours(servers, monkeypatch)
    assert round(tables[0]["estimate"][1] - tables[1]["estimate"][1], 6) == 5.0
    assert rules[0]["declared_nulls"]["size"] == 11  # size=5-9: 10 + the record
    assert rules[1]["declared_nulls"]["size"] == 10


@pytest.mark.parametrize("key_in_files", [False, True])
def test_spark_partition_columns_come_from_each_files_own_path(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key_in_files: bool
        ) -> None:
    """Hive folders give ``state`` its value file by file; D' has the record at the root.

    With ``key_in_files`` the partition files also store ``state`` as "99": the folder wins.
    """
    servers = _hive_servers(tmp_path, ("state=01", "state=02"), "0extra.parquet", INTS,
                            key_in_files)
    tables, _ = _neighbours(servers, monkeypatch)
    assert tables[0]["state"].to_list() == ["01", "02"]
    assert round(tables[0]["estimate"][1] - tables[1]["estimate"][1], 6) == 5.0
    assert abs(tables[1]["estimate"][0] - 45) < 30 and abs(tables[1]["estimate"][1] - 45) < 30


def test_read_declared_spark_matches_scan_declared(spark: Any, tmp_path: Path) -> None:
    """Frame for frame, the engines agree.

    Mixed dtypes, a missing column, an all-null file column, hive values, a ``decimal256``
    file and a file with no declared column.
    """
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from tabdp.release.curator_config import SCHEMA_DTYPES
    from tabdp.release.declared import LOST, read_declared_spark, scan_declared

    ds = tmp_path / "ds"
    (ds / "k=7").mkdir(parents=True)
    (ds / "k=x").mkdir()
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int32()), "v": [3.0, 2.5]}),
                   ds / "k=7" / "a.parquet")
    pq.write_table(pa.table({"id": pa.array([3], pa.uint64()), "v": ["4"],
                             "k": pa.array([1], pa.int64())}), ds / "k=x" / "b.parquet")
    pq.write_table(pa.table({"id": pa.array([4], pa.int64()),
                             "v": pa.array([None], pa.null())}), ds / "c.parquet")
    pq.write_table(pa.table({"id": pa.array([5], pa.int64()),
                             "v": pa.array([decimal.Decimal("6")], pa.decimal256(40, 2))}),
                   ds / "d.parquet")
    (ds / "k=3").mkdir()  # no declared column in the file: its rows still count
    pq.write_table(pa.table({"z": [1, 2]}), ds / "k=3" / "e.parquet")
    schema = {c: SCHEMA_DTYPES[t] for c, t in {"id": "Int64", "v": "Int64", "k": "Int64"}
              .items()}
    want = scan_declared(ds, schema, flag_lost=True).collect().sort("id", "k", nulls_last=True)
    got = pl.from_arrow(read_declared_spark(spark, ds, schema, flag_lost=True)
                        .toArrow()).sort("id", "k", nulls_last=True)
    assert got.columns == ["id", "v", "k"] + [LOST + c for c in ("id", "v", "k")]
    assert got.rows() == want.rows(), (got, want)
    assert got.rows()[0] == (1, 3, 7, False, False, False)
    assert got.filter(pl.col("k") == 3).rows() == [(None, None, 3, False, False, False)] * 2


@pytest.mark.parametrize("zone", ["UTC", "America/Los_Angeles"])
def test_read_declared_spark_datetimes_are_utc_whatever_the_session_zone(
        spark: Any, tmp_path: Path, zone: str) -> None:
    """Declared Datetime: the instants Polars reads, in any Spark session time zone.

    A timestamp without a zone is a UTC wall time (Spark's own cast would read it in the
    session's zone), exact to the microsecond, also at a wall time the session's zone skips
    (2021-03-14 02:30 in Los Angeles); a zoned one is its instant; a nanosecond one, which
    Spark cannot read, is null (counted).
    """
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from tabdp.release.curator_config import SCHEMA_DTYPES
    from tabdp.release.declared import LOST, read_declared_spark, scan_declared

    gap = 1615689000123456  # 2021-03-14 02:30:00.123456 (as UTC micros)
    files = [("ms", None, 10**12), ("us", None, gap), ("us", "UTC", gap),
             ("s", "America/New_York", 10**9), ("ns", None, 10**18)]
    for i, (unit, tz, value) in enumerate(files):
        pq.write_table(pa.table({"i": [i], "t": pa.array([value], pa.timestamp(unit, tz=tz))}),
                       tmp_path / f"f{i}.parquet")
    schema = {"i": SCHEMA_DTYPES["Int64"], "t": SCHEMA_DTYPES["Datetime"]}
    want = scan_declared(tmp_path, schema).collect().sort("i")
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", zone)
    try:
        sdf = read_declared_spark(spark, tmp_path, schema, flag_lost=True)
        got = sorted(sdf.selectExpr("i", "unix_micros(t)", f"`{LOST}t`").collect())
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)
    micros = want["t"].dt.epoch("us").to_list()
    assert micros == [10**15, gap, gap, 10**15, 10**15]
    assert [tuple(r) for r in got] == [(0, 10**15, False), (1, gap, False), (2, gap, False),
                                       (3, 10**15, False), (4, None, True)]


def _not_utf8(values: list[bytes]) -> Any:
    """A pyarrow string array holding these bytes, UTF-8 or not (pyarrow does not check)."""
    import numpy as np

    pa = pytest.importorskip("pyarrow")
    ends = np.cumsum([0] + [len(v) for v in values]).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), len(values),
                                 [None, pa.py_buffer(ends.tobytes()),
                                  pa.py_buffer(b"".join(values))])


def test_spark_text_not_utf8_is_null(spark: Any, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """D' adds a record whose ``state`` is not UTF-8: null on both engines, counted alike.

    Spark reads text without checking it (the bytes would stay a value outside the
    domain); Polars refused the whole file. Both now make it null (review R14).
    """
    servers = _r12_servers(tmp_path, INTS, None, {"state": _not_utf8([b"0\xff"])},
                           seeded=True)
    tables, rules = _neighbours(servers, monkeypatch)
    assert tables[0].equals(tables[1])
    assert [r["declared_nulls"]["state"] for r in rules] == [1, 0]


@pytest.mark.parametrize("folder", [b"state=\xff", b"l\xe9gacy"])
def test_spark_folder_name_not_utf8(spark: Any, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch, folder: bytes) -> None:
    """D''s record is in a folder named with bytes that are not UTF-8 (review R14).

    A partition value that is not UTF-8 is null; any other folder is only a name: the file
    is read (Java cannot name the path: Spark reads it through a UTF-8 alias).
    """
    import os

    with_, without = _r12_servers(tmp_path, INTS, None, seeded=True)
    target = os.path.join(os.fsencode(with_ / "ds"), folder)
    os.mkdir(target)
    os.rename(with_ / "ds" / "s03.parquet", os.path.join(target, b"x.parquet"))
    tables, rules = _neighbours((with_, without), monkeypatch)
    hive = folder.startswith(b"state=")
    diff = round(tables[0]["estimate"][1] - tables[1]["estimate"][1], 6)
    assert diff == (0.0 if hive else 5.0)
    assert [r["declared_nulls"]["state"] for r in rules] == [int(hive), 0]


# -- held: Spark reads folder and file names with URI and glob characters as Polars does ----
_ODD_NAMES = ["state=a:b/x.parquet", "state=%3A/x.parquet", "state=a b/x.parquet",
              "state=a#b/x.parquet", "state=a{b/x.parquet", "state=a?b/x.parquet",
              "state=a]b/x.parquet", "state=a\\b/x.parquet", "state=a%/x.parquet",
              "state=a%2Fb/x.parquet", "state=02/x:y.parquet", "state=02/x%20y.parquet",
              "_temporary/0/part-0.parquet", ".hidden/x.parquet", "state=02/x.parquet "]


pa = pytest.importorskip("pyarrow")


pq = pytest.importorskip("pyarrow.parquet")


# origin: review R15
@pytest.mark.spark
def test_r15_spark_reads_odd_names_as_polars(spark: Any, tmp_path: Path) -> None:
    """Held: Spark reads odd folder and file names as Polars does.

    One record alone in a file whose folder or name holds ``:``, ``%``, ``#``,
    glob characters, a backslash, or hidden / bookkeeping folders (a hive writer names a
    folder after a record's value): Spark's rows equal Polars' (Hadoop's path parsing and
    globbing neither fail nor read another file).
    """
    from tabdp.release.declared import read_declared_spark, scan_declared

    schema = {"estab_id": pl.Int64, "state": pl.String, "v": pl.Int64}
    for i, rel in enumerate(_ODD_NAMES):
        d = tmp_path / f"d{i}"
        d.mkdir()
        pq.write_table(pa.table({"estab_id": pa.array([1], pa.int64()), "state": ["01"],
                                 "v": pa.array([1], pa.int64())}), d / "base.parquet")
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"estab_id": pa.array([1000], pa.int64()), "state": ["02"],
                                 "v": pa.array([5], pa.int64())}), d / rel)
        want = scan_declared(d, schema).sort("estab_id").collect().rows()
        got = sorted(tuple(r) for r in read_declared_spark(spark, d, schema).collect())
        assert got == want, rel
        assert len(want) == (1 if rel.endswith(" ") else 2), rel


def _spark_views(servers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
                 ) -> list[tuple[int, str, str]]:
    text = R12_SPEC.format(extra="[randomness]\nseed = 7")
    return [_r12_run(s, monkeypatch, text, "--test-seed", "--engine", "spark") for s in servers]


def test_spark_file_with_a_twin_in_letter_case_is_null_there(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """D' adds a file with columns ``v`` and ``V`` (stop 64): Spark cannot read ``v`` apart.

    Spark's Parquet reader (case insensitive, its default) stopped the job on that file:
    D' exited 4, D 0, where Polars runs both. ``v`` is now null in that file (as a column
    Spark cannot read), counted for the curator; the run is the same on D and D'.
    """
    pa = pytest.importorskip("pyarrow")
    servers = _r12_servers(tmp_path, INTS, None, extra_cols={"V": pa.array([7], pa.int64())},
                           seeded=True)
    views = _spark_views(servers, monkeypatch)
    assert views[0][0] == 0, views[0]
    assert views[0] == views[1]
    tables = [pl.read_parquet(s / "releases" / "r12" / "public" / "t.parquet") for s in servers]
    assert tables[0].equals(tables[1])  # the record's v is null, then dropped
    rules = [json.loads((s / "releases" / "r12" / "confidential" / "confidential.json")
                        .read_text())["input_rules"] for s in servers]
    assert rules[0]["declared_nulls"]["v"] == 1 and rules[1]["declared_nulls"]["v"] == 0
    # the curator is told which file and why (stop 65: only the count), in confidential.json
    notes = rules[0]["declared_null_files"]
    assert [(n["file"], n["column"], n["twins"]) for n in notes] == [("s03.parquet", "v", ["V"])]
    assert "caseSensitive" in notes[0]["reason"]
    assert "declared_null_files" not in rules[1]
    # ... and the author is not: the public files are the same names, none names the file
    pubs = [s / "releases" / "r12" / "public" for s in servers]
    files = [sorted(p.relative_to(pub).as_posix() for p in pub.rglob("*") if p.is_file())
             for pub in pubs]
    assert files[0] == files[1]
    for p in pubs[0].rglob("*"):
        if p.is_file():
            assert b"s03" not in p.read_bytes(), p


def test_spark_declared_read_reads_each_footer_once(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A case-insensitive Spark read takes each file's columns from `file_plans`' one read.

    `_case_twins_unreadable` and the curator's notes read every file's footer again (twice
    more for a file with twins in letter case, stop 65's last open item): the same columns,
    the same notes, each footer read once.
    """
    import tabdp.release.declared as dec

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"v": [1], "V": [2], "w": [3]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"v": [4], "w": [5]}), tmp_path / "b.parquet")
    reads: list[str] = []
    real = dec.file_columns

    def counted(file: Path) -> Any:
        reads.append(Path(file).name)
        return real(file)

    monkeypatch.setattr(dec, "file_columns", counted)
    notes: list[dict[str, Any]] = []
    got = sorted((tuple(r) for r in dec.read_declared_spark(
        spark, tmp_path, {"v": pl.Int64, "w": pl.Int64}, notes=notes).collect()),
        key=lambda r: r[1])
    assert got == [(None, 3), (4, 5)]
    assert [(n["file"], n["column"], n["twins"]) for n in notes] == [("a.parquet", "v", ["V"])]
    assert sorted(reads) == ["a.parquet", "b.parquet"]


def test_spark_declared_columns_equal_in_letter_case_refused_as_other_inputs(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A declared schema with ``v`` and ``V`` (stop 64): the refusal of every Spark input.

    The same error class and message as an input read with columns equal in letter case
    (`refuse_case_clashes`), in the confidential ``failure.json``; exit 4 (after the input
    was opened, as that refusal) on D and D' alike, whether or not a file holds both.
    """
    pa = pytest.importorskip("pyarrow")
    servers = _r12_servers(tmp_path, {**INTS, "V": "Int64"}, None,
                           extra_cols={"V": pa.array([7], pa.int64())}, seeded=True)
    views = _spark_views(servers, monkeypatch)
    assert views[0][0] == 4, views[0]
    assert views[0] == views[1]
    for s in servers:
        failure = json.loads((s / "releases" / "r12" / "confidential" / "failure.json")
                             .read_text())
        assert failure["error"] == "SpecError", failure
        assert "differ only in letter case ([['v', 'V']])" in failure["message"]
