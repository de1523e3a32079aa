"""Conversions that put a record in a cell it is not in (noted by review r75; stop 60).

1. On Spark, dates and timestamps converted in the session's time zone: a timestamp key under
   a date domain (or key set), a date key under a timestamp one, and a key set of timestamps
   without a zone, landed in other cells under another ``spark.sql.session.timeZone`` than
   on Polars. Now both engines convert in UTC, whatever the session's setting.
2. Spark's hierarchy mappings (the derived coarser key columns) went through pandas: an
   unsigned 64-bit code above ``2**63`` was lost (and Spark's Arrow fallback warned on the
   terminal). Now they reach Spark as an Arrow table, converted as the Polars engine does.
3. Author mode's key casts truncated a fraction in a key of an integer domain (``1.5`` became
   ``1``, a cell the record is not in) on both engines. Now the declared types' conversion
   applies: ``1.5`` is null (outside the key set, like any key outside it), ``3.0`` is ``3``.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _curator import NOISY, R15_SPEC, write_curator  # noqa: E402
from _specs import author_input, release_spec, table  # noqa: E402
from test_author_attacks import _r12_run  # noqa: E402

ZONES = ["America/Los_Angeles", "Asia/Tokyo", "UTC"]
UTC = dt.UTC
#: Instants near midnight UTC (and near midnight in Los Angeles and Tokyo).
INSTANTS = [dt.datetime(2020, 1, 1, 0, 0, tzinfo=UTC), dt.datetime(2020, 1, 1, 23, 30, tzinfo=UTC),
            dt.datetime(2020, 1, 2, 0, 0, tzinfo=UTC), dt.datetime(2020, 1, 2, 0, 30, tzinfo=UTC),
            dt.datetime(2020, 1, 1, 8, 0, tzinfo=UTC),  # midnight in Los Angeles
            dt.datetime(2020, 1, 1, 15, 0, tzinfo=UTC),  # midnight in Tokyo (Jan 2)
            dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), None]


def _zone(spark: Any, zone: str) -> Any:
    """Context: the session's time zone set to ``zone`` (restored after)."""
    import contextlib

    @contextlib.contextmanager
    def cm() -> Any:
        before = spark.conf.get("spark.sql.session.timeZone")
        spark.conf.set("spark.sql.session.timeZone", zone)
        try:
            yield
        finally:
            spark.conf.set("spark.sql.session.timeZone", before)
    return cm()


def _instants(spark: Any) -> Any:
    """A Spark frame of `INSTANTS` (a ``timestamp`` column ``t``, built from UTC micros)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
    micros = [None if t is None else (t - epoch) // dt.timedelta(microseconds=1)
              for t in INSTANTS]
    base = spark.createDataFrame([(i, m) for i, m in enumerate(micros)],
                                 T.StructType([T.StructField("i", T.LongType()),
                                               T.StructField("m", T.LongType())]))
    return base.select("i", F.timestamp_micros("m").alias("t"))


# -- 1. time zones ------------------------------------------------------------------------
@pytest.mark.spark
@pytest.mark.parametrize("zone", ZONES)
def test_spark_timestamp_to_date_is_the_utc_date_as_polars(spark: Any, zone: str) -> None:
    """The declared types' conversion and author mode's key casts: timestamp -> date."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from tabdp.release._spark_run import author_key_casts
    from tabdp.release.declared import convert_leniently, convert_leniently_spark

    want = pl.DataFrame({"t": INSTANTS}, schema={"t": pl.Datetime("us", "UTC")}).select(
        convert_leniently(pl.col("t"), pl.Datetime("us", "UTC"), pl.Date))["t"].to_list()
    assert want[:4] == [dt.date(2020, 1, 1)] * 2 + [dt.date(2020, 1, 2)] * 2
    with _zone(spark, zone):
        sdf = _instants(spark)
        got = [r[0] for r in sdf.orderBy("i").select(
            convert_leniently_spark(F.col("t"), T.TimestampType(), pl.Date)).collect()]
        keyed = author_key_casts(sdf, ["t"], {"t": pl.Series([dt.date(2020, 1, 1)])})
        cast = [r[0] for r in keyed.orderBy("i").select("t").collect()]
        # and back: a date's timestamp is its UTC midnight
        back = [r[0] for r in sdf.orderBy("i").select(F.unix_seconds(convert_leniently_spark(
            convert_leniently_spark(F.col("t"), T.TimestampType(), pl.Date), T.DateType(),
            pl.Datetime("us")))).collect()]
    assert got == want, (zone, got, want)
    assert cast == want, (zone, cast, want)
    assert back == [None if d is None else (d - dt.date(1970, 1, 1)).days * 86400
                    for d in want]


@pytest.mark.spark
@pytest.mark.parametrize("zone", ZONES)
def test_spark_cells_of_timestamps_under_date_and_datetime_key_sets(spark: Any,
                                                                    zone: str) -> None:
    """A timestamp key column against a key set of dates, and of datetimes: Polars' cells.

    Polars compares a Datetime with a Date key set as dates and keeps only exact conversions
    (midnight UTC); a Datetime key set (no zone: UTC wall times) matches those instants.
    """
    from tabdp import KeySet
    from tabdp.frame._engine import _cells
    from tabdp.frame._spark import _CELL, _attach_cells

    data = pl.DataFrame({"i": range(len(INSTANTS)), "t": INSTANTS},
                        schema={"i": pl.Int64, "t": pl.Datetime("us", "UTC")}).with_columns(
        pl.col("t").dt.replace_time_zone(None))
    expected = [[0, None, 1, None, None, None, None, None],
                [None, 0, 2, None, 1, None, None, None]]
    for keys, cells in zip((KeySet.from_dict({"t": [dt.date(2020, 1, 1), dt.date(2020, 1, 2)]}),
                            KeySet.from_dict({"t": pl.Series([dt.datetime(2020, 1, 1, 23, 30),
                                                              dt.datetime(2020, 1, 1, 8, 0),
                                                              dt.datetime(2020, 1, 2)])})),
                           expected, strict=True):
        want = _cells(data, data.schema, keys, ["t"], "cell")["cell"].to_list()
        assert want == cells
        with _zone(spark, zone):
            sdf = _instants(spark)
            schema = {f.name: f.dataType for f in sdf.schema.fields}
            got = [r[0] for r in _attach_cells(spark, sdf, keys, ["t"], schema)
                   .orderBy("i").select(_CELL).collect()]
        assert got == want, (zone, keys.to_polars(), got, want)


# -- 2. hierarchy mappings on Spark ---------------------------------------------------------
@pytest.mark.spark
def test_spark_derived_levels_exact_as_polars(spark: Any,
                                              capfd: pytest.CaptureFixture[str]) -> None:
    """Unsigned 64-bit codes above 2**63 and 64-bit codes around 2**53: Polars' joins.

    A ``UInt64`` Parquet column is ``decimal(20,0)`` on Spark; the mapping's codes are
    converted to it on the driver, as the Polars engine converts them. Through pandas the
    code ``2**63 + 1`` was lost (the row had no coarser code) and Spark's Arrow conversion
    warned on the terminal.
    """
    import decimal

    from pyspark.sql import types as T

    from tabdp.release._spark_run import add_derived

    big = 2**63 + 1
    mapping = pl.DataFrame({"f": pl.Series([big, 7, 2**53 + 1], dtype=pl.UInt64),
                            "c": pl.Series([5, 2**53 + 1, 2**53], dtype=pl.Int64)})
    data = pl.DataFrame({"f": pl.Series([big, 7, 2**53, 2**53 + 1, None], dtype=pl.UInt64)})
    want = data.join(mapping, on="f", how="left", maintain_order="left")["c"].to_list()
    assert want == [5, 2**53 + 1, None, 2**53, None]
    sdf = spark.createDataFrame([(i, None if v is None else decimal.Decimal(v))
                                 for i, v in enumerate(data["f"].to_list())],
                                T.StructType([T.StructField("i", T.LongType()),
                                              T.StructField("f", T.DecimalType(20, 0))]))
    capfd.readouterr()
    got = [r[0] for r in add_derived(spark, sdf, {"c": mapping}, None)
           .orderBy("i").select("c").collect()]
    assert got == want
    assert "Arrow" not in capfd.readouterr().err


# -- 3. author key casts: no truncation -----------------------------------------------------
_SPEC = SimpleNamespace(tables=[SimpleNamespace(by=["size"])],
                        domains={"size": pl.Series([1, 2, 3])})
_SIZES = [1.0, 1.5, 2.0, -0.5, 2.999, float("nan"), float("inf"), None, 2.0**63]


def test_author_key_casts_keep_fractions_out_of_integer_domains() -> None:
    """Polars (in memory and streaming): a fraction is null (outside the key set), not cut."""
    from tabdp.release._input import _author_key_casts

    lf = pl.LazyFrame({"size": _SIZES}, schema={"size": pl.Float64})
    out = _author_key_casts(_SPEC, lf)  # type: ignore[arg-type]
    want = [1, None, 2, None, None, None, None, None, None]
    assert out.collect()["size"].to_list() == want
    assert out.collect(engine="streaming")["size"].to_list() == want


@pytest.mark.spark
def test_spark_author_key_casts_keep_fractions_out_of_integer_domains(spark: Any) -> None:
    """Spark: the same nulls (Spark's cast truncated 1.5 to 1 and saturated 2**63)."""
    from pyspark.sql import types as T

    from tabdp.release._spark_run import author_key_casts

    sdf = spark.createDataFrame([(i, v) for i, v in enumerate(_SIZES)],
                                T.StructType([T.StructField("i", T.LongType()),
                                              T.StructField("size", T.DoubleType())]))
    out = author_key_casts(sdf, ["size"], dict(_SPEC.domains))
    got = [r[0] for r in out.orderBy("i").select("size").collect()]
    assert got == [1, None, 2, None, None, None, None, None, None]


def _size_spec(name: str, unit: bool) -> str:
    """A sum of ``v`` by ``size`` (domain 1, 2) of the dataset ``cbp`` (``unit``: by estab_id)."""
    return release_spec(
        table("t", ["size"], '{ family = "gaussian", sigma = 3 }', measures=["v"]),
        name=name, input_table=author_input("v = [0, 100]", source='dataset = "cbp"',
                                            unit="estab_id" if unit else None,
                                            unit_nulls="drop" if unit else None),
        domains={"size": [1, 2]}, seed=7, output=False)


def _size_servers(tmp_path: Path) -> tuple[Path, Path]:
    """D: 20 records of sizes 1 and 2 (a Float64 column); D': one more, of size 1.5."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    out = []
    for name, extra in (("with", True), ("without", False)):
        root = tmp_path / name
        (root / "ds").mkdir(parents=True)
        pq.write_table(pa.table({"estab_id": pa.array(range(20), pa.int64()),
                                 "size": [1.0] * 10 + [2.0] * 10,
                                 "v": pa.array(range(20), pa.int64())}), root / "ds" / "a.parquet")
        if extra:
            pq.write_table(pa.table({"estab_id": pa.array([1000], pa.int64()), "size": [1.5],
                                     "v": pa.array([50], pa.int64())}),
                           root / "ds" / "b.parquet")
        write_curator(root, {"cbp": "ds"}, seeded=True,
                      schemas={"cbp": {"estab_id": "Int64", "size": "Float64", "v": "Int64"}})
        out.append(root)
    return out[0], out[1]


def _runs(servers: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, *flags: str,
          unit: bool = True) -> list[pl.DataFrame]:
    """Both servers: the same exit code, stdout and stderr, and equal public tables.

    ``unit=False``: row mode, which streams the input (docs/release-workflow.md).
    """
    name = ("units" if unit else "rows") + "_" + ("spark" if "spark" in flags else "polars")
    text = _size_spec(name, unit)
    views = [_r12_run(s, monkeypatch, text, "--test-seed", *flags) for s in servers]
    assert views[0] == views[1], views
    assert views[0][0] == 0, views[0]
    tables = [pl.read_parquet(s / "releases" / name / "public" / "t.parquet")
              for s in servers]
    # the size-1.5 record is in no cell: the tables are equal, noise included (one seed)
    assert tables[0].equals(tables[1]), tables
    return tables


def test_author_run_fraction_key_is_outside_the_key_set(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """End to end (Polars, in memory and streaming): the record of size 1.5 is in no cell.

    Before, it was cast to size 1 and the size-1 cell's estimate differed by its value (50).
    """
    servers = _size_servers(tmp_path)
    tables = _runs(servers, monkeypatch)
    assert tables[0].drop(NOISY, strict=False).height == 2
    streamed = _runs(servers, monkeypatch, unit=False)  # row mode: streamed
    assert streamed[0].drop(NOISY, strict=False).equals(tables[0].drop(NOISY, strict=False))


@pytest.mark.spark
def test_spark_author_run_fraction_key_is_outside_the_key_set(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end on Spark: the same public tables as Polars on both servers."""
    servers = _size_servers(tmp_path)
    for unit in (True, False):
        polars = _runs(servers, monkeypatch, unit=unit)
        on_spark = _runs(servers, monkeypatch, "--engine", "spark", unit=unit)
        assert on_spark[0].equals(polars[0]), (unit, on_spark, polars)


@pytest.mark.spark
@pytest.mark.parametrize("zone", ZONES)
def test_spark_timestamp_as_text_is_polars_text(spark: Any, zone: str) -> None:
    """A timestamp converted to text (a declared String, a key of a text domain): Polars' text.

    Spark's cast wrote the session's wall time without the microseconds
    (``2020-01-02 08:30:00`` in Tokyo for Polars' ``2020-01-01 23:30:00.000000``).
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from tabdp.release._spark_run import author_key_casts
    from tabdp.release.declared import convert_leniently, convert_leniently_spark

    naive = pl.DataFrame({"t": INSTANTS}, schema={"t": pl.Datetime("us", "UTC")}).with_columns(
        pl.col("t").dt.replace_time_zone(None))
    want = naive.select(convert_leniently(pl.col("t"), pl.Datetime("us"), pl.String))["t"]
    assert want[1] == "2020-01-01 23:30:00.000000"
    assert want[6] == "1969-12-31 23:59:59.999999"
    with _zone(spark, zone):
        sdf = _instants(spark)
        got = [r[0] for r in sdf.orderBy("i").select(
            convert_leniently_spark(F.col("t"), T.TimestampType(), pl.String)).collect()]
        wall = F.col("t").cast(T.TimestampNTZType())
        ntz = [tuple(r) for r in sdf.orderBy("i").select(wall, convert_leniently_spark(
            wall, T.TimestampNTZType(), pl.String)).collect()]
        keyed = author_key_casts(sdf, ["t"], {"t": pl.Series(["2020-01-01 23:30:00.000000"])})
        cast = [r[0] for r in keyed.orderBy("i").select("t").collect()]
    assert got == want.to_list(), (zone, got)
    assert cast == want.to_list(), (zone, cast)
    # a timestamp without a zone is a wall time: its text is that wall time, in any zone
    assert [t for _, t in ntz] == [None if w is None else w.strftime("%Y-%m-%d %H:%M:%S.%f")
                                   for w, _ in ntz], ntz



# -- 4. text as a date (review r81) ---------------------------------------------------------
#: Text and the date both engines read it as (as text): ``YYYY-MM-DD`` only. Before, Polars
#: also read `` 2020-01-01``, ``2020-1-1`` and ``+2020-01-01``, Spark ``2020``, ``2020-01``,
#: ``2020-01-01 10:00`` and a trailing space: a key under a date domain fell in other cells.
_DATE_TEXT = {"2020-01-01": "2020-01-01", "0000-01-01": "0000-01-01", "2020-1-1": None,
              "2020": None, "2020-01": None, " 2020-01-01": None, "2020-01-01 ": None,
              "2020-01-01T00:00": None, "2020-01-01 10:00": None, "+2020-01-01": None,
              "02020-01-01": None, "-0001-01-01": None, "2020-02-30": None,
              "2020-01-01\n": None, "\uff12\uff10\uff12\uff10-01-01": None, "": None,
              "1999-12-31": "1999-12-31"}


def test_text_is_a_date_only_in_iso_form() -> None:
    """Polars: the declared conversion and author key casts, in memory and streaming."""
    from tabdp.release.declared import convert_leniently

    lf = pl.LazyFrame({"s": [*_DATE_TEXT, None]})
    for engine in ("in-memory", "streaming"):
        got = lf.select(convert_leniently(pl.col("s"), pl.String, pl.Date)
                        .cast(pl.String).alias("s")).collect(engine=engine)  # type: ignore[call-overload]
        assert got["s"].to_list() == [*_DATE_TEXT.values(), None], engine


@pytest.mark.spark
@pytest.mark.parametrize("zone", ["UTC", "Pacific/Kiritimati"])
def test_spark_text_is_a_date_only_in_iso_form(spark: Any, zone: str) -> None:
    """Spark: the same dates (declared conversion and author key casts)."""
    from pyspark.sql import functions as F

    from tabdp.release._spark_run import author_key_casts
    from tabdp.release.declared import convert_leniently_spark

    with _zone(spark, zone):
        sdf = spark.createDataFrame([(i, v) for i, v in enumerate([*_DATE_TEXT, None])],
                                    "i long, s string")
        got = [r[0] for r in sdf.orderBy("i").select(convert_leniently_spark(
            F.col("s"), sdf.schema["s"].dataType, pl.Date).cast("string")).collect()]
        keyed = author_key_casts(sdf, ["s"], {"s": pl.Series([dt.date(2020, 1, 1)])})
        cast = [r[0] for r in keyed.orderBy("i").select(F.col("s").cast("string")).collect()]
    assert got == [*_DATE_TEXT.values(), None]
    assert cast == got


# -- 5. a file's timestamp declared as text (review r81) -------------------------------------
#: (file dtype) -> a timestamp column of that unit and zone holding 2020-01-01 23:30 UTC.
_STAMP_FILES = [pl.Datetime("us"), pl.Datetime("ms"), pl.Datetime("us", "UTC"),
                pl.Datetime("us", "Asia/Tokyo"), pl.Datetime("ms", "America/Los_Angeles")]


def _stamp_file(folder: Path, dtype: Any) -> Path:
    stamps = pl.Series("t", [dt.datetime(2020, 1, 1, 23, 30), dt.datetime(1969, 12, 31, 23, 59,
                                                                             59, 999000), None])
    col = stamps.cast(pl.Datetime(dtype.time_unit))
    if dtype.time_zone is not None:
        col = col.dt.replace_time_zone("UTC").dt.convert_time_zone(dtype.time_zone)
    path = folder / f"{dtype.time_unit}_{str(dtype.time_zone).replace('/', '_')}.parquet"
    pl.DataFrame({"t": col}).write_parquet(path)
    return path


_STAMP_TEXT = ["2020-01-01 23:30:00.000000", "1969-12-31 23:59:59.999000", None]


@pytest.mark.parametrize("dtype", _STAMP_FILES, ids=str)
def test_declared_text_of_a_timestamp_is_its_utc_wall_time(tmp_path: Path, dtype: Any) -> None:
    """Polars: whatever the file's zone and unit, the text Spark writes (UTC, microseconds).

    Before, a zoned timestamp was its local wall time with the offset
    (``2020-01-02 08:30:00.000000+09:00``) and milliseconds had 3 digits, so one instant was
    other text (another cell) by the file it came from, and on Spark.
    """
    from tabdp.release.declared import scan_declared

    path = _stamp_file(tmp_path, dtype)
    for engine in ("in-memory", "streaming"):
        got = scan_declared(path, {"t": pl.String()}).collect(engine=engine)  # type: ignore[call-overload]
        assert got["t"].to_list() == _STAMP_TEXT, (dtype, engine)


@pytest.mark.spark
def test_spark_declared_text_of_a_timestamp_is_polars_text(spark: Any, tmp_path: Path) -> None:
    """Spark, in two session zones: the same text as Polars for every file zone and unit."""
    from tabdp.release.declared import read_declared_spark

    for dtype in _STAMP_FILES:
        path = _stamp_file(tmp_path, dtype)
        for zone in ("Asia/Tokyo", "Pacific/Kiritimati"):
            with _zone(spark, zone):
                got = [r[0] for r in read_declared_spark(spark, path, {"t": pl.String()})
                       .collect()]
            assert sorted(got, key=str) == sorted(_STAMP_TEXT, key=str), (dtype, zone, got)


# -- 6. dtype pairs: dictionary-encoded text, pairs Polars does not convert (review r81) -----
def _mixed_files(folder: Path) -> Path:
    """One declared column ``d`` stored with another type by each file (one record each)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    folder.mkdir()
    columns = {"a": pa.array([dt.date(2020, 1, 1)]), "b": pa.array([5], pa.int64()),
               "c": pa.array([True]), "e": pa.array([1.5]),
               "f": pa.array(["2020-01-02"]).dictionary_encode(),
               "g": pa.array(["7"]).dictionary_encode(), "h": pa.array(["2020-01-03 10:00"])}
    for i, (name, col) in enumerate(columns.items()):
        pq.write_table(pa.table({"d": col, "v": pa.array([i], pa.int64())}),
                       folder / f"{name}.parquet")
    return folder


#: Declared dtype -> ``d`` of the files in order (a: Date, b: Int64, c: Boolean, e: Float64,
#: f, g: dictionary-encoded text, h: text). Dictionary-encoded text converts as text (it was
#: null on Polars as a Date or a number, and parsed on Spark); text is not a timestamp and a
#: date not a number on either engine (Spark parsed the one and refused the other).
_MIXED = {pl.Date(): [dt.date(2020, 1, 1), None, None, None, dt.date(2020, 1, 2), None, None],
          pl.Int64(): [None, 5, 1, None, None, 7, None],
          pl.Boolean(): [None, None, True, None, None, None, None],  # 5 is not 0 or 1
          pl.Datetime("us"): [dt.datetime(2020, 1, 1), None, None, None, None, None, None]}


@pytest.mark.parametrize("declared", list(_MIXED), ids=str)
def test_declared_pairs_on_polars(tmp_path: Path, declared: Any) -> None:
    """Polars, in memory and streaming: the values of `_MIXED`."""
    from tabdp.release.declared import scan_declared

    folder = _mixed_files(tmp_path / "ds")
    for engine in ("in-memory", "streaming"):
        got = scan_declared(folder, {"d": declared, "v": pl.Int64()}).collect(
            engine=engine).sort("v")  # type: ignore[call-overload]
        assert got["d"].to_list() == _MIXED[declared], (declared, engine)


@pytest.mark.spark
def test_spark_declared_pairs_as_polars(spark: Any, tmp_path: Path) -> None:
    """Spark: the same values; no dtype pair stops the read (an AnalysisException before)."""
    from tabdp.release.declared import read_declared_spark

    folder = _mixed_files(tmp_path / "ds")
    for declared, want in _MIXED.items():
        got = read_declared_spark(spark, folder, {"d": declared, "v": pl.Int64()})
        assert [r[0] for r in got.orderBy("v").select("d").collect()] == want, declared


@pytest.mark.spark
def test_spark_author_run_one_file_of_another_type(spark: Any, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """D' has one more file whose ``size`` (declared Float64) is stored as a Date.

    Before, Spark refused to cast a date to a double (AnalysisException): the run with the
    record exited 4 ("data-dependent failure"), the one without it 0. Now the value is null
    (outside the key set), as on Polars: the same exit code, output and tables.
    """
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    servers = _size_servers(tmp_path)
    pq.write_table(pa.table({"estab_id": pa.array([1000], pa.int64()),
                             "size": pa.array([dt.date(2020, 1, 1)]),
                             "v": pa.array([50], pa.int64())}), servers[0] / "ds" / "b.parquet")
    polars = _runs(servers, monkeypatch)
    on_spark = _runs(servers, monkeypatch, "--engine", "spark")
    assert on_spark[0].equals(polars[0])


# -- 7. a date whose midnight a timestamp cannot hold (review r82) --------------------------
#: Days from 1970-01-01: the last whose UTC midnight fits 64-bit microseconds either side,
#: then the first beyond, and the int32 extremes a Parquet date can store.
_FAR_DAYS = [106_751_991, -106_751_991, 106_751_992, -106_751_992, 2**31 - 1, -(2**31), 0]


def _far_dates(path: Path) -> Path:
    """A Parquet file of `_FAR_DAYS` as ``date32`` (``d``) with their order (``i``)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"d": pa.array(_FAR_DAYS, pa.int32()).view(pa.date32()),
                             "i": pa.array(range(len(_FAR_DAYS)), pa.int64())}), path)
    return path


def test_far_dates_as_timestamps_on_polars(tmp_path: Path) -> None:
    """Polars: a date declared ``Datetime`` is null where its midnight passes the range."""
    from tabdp.release.declared import scan_declared

    got = scan_declared(_far_dates(tmp_path / "d.parquet"),
                        {"d": pl.Datetime("us"), "i": pl.Int64()}).collect().sort("i")
    micros = got["d"].dt.epoch("us").to_list()
    day = 86_400 * 10**6
    assert micros == [106_751_991 * day, -106_751_991 * day, None, None, None, None, 0]


@pytest.mark.spark
@pytest.mark.parametrize("ansi", ["true", "false"])
def test_spark_far_dates_as_timestamps_as_polars(spark: Any, tmp_path: Path, ansi: str) -> None:
    """Spark: the same values, under either ANSI setting.

    Before, ``timestamp_seconds`` raised DATETIME_OVERFLOW (ANSI or not) on such a date, so
    one record's date stopped the job: an author-mode run exited 4 on D' and 0 on D.
    """
    from pyspark.sql import functions as F

    from tabdp.release.declared import read_declared_spark

    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", ansi)
    try:
        got = read_declared_spark(spark, _far_dates(tmp_path / "d.parquet"),
                                  {"d": pl.Datetime("us"), "i": pl.Int64()})
        micros = [r[0] for r in got.orderBy("i").select(F.unix_micros("d")).collect()]
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)
    day = 86_400 * 10**6
    assert micros == [106_751_991 * day, -106_751_991 * day, None, None, None, None, 0]


#: R15's author spec over a ``day`` timestamp key (its sum table alone)
_DAY_SPEC = (R15_SPEC.replace('name = "r15"', 'name = "days"')
             .replace('mode = "author"', 'unit = "estab_id"\nmode = "author"')
             .replace('state = ["01", "02"]',
                      'day = ["2020-01-01 00:00:00", "2021-01-01 00:00:00"]')
             .replace('by = ["state"]', 'by = ["day"]')
             .replace('[[tables]]\nname = "n"\nkind = "count"\nby = ["day"]\n', ""))


@pytest.mark.spark
def test_spark_author_run_far_date_in_a_timestamp_key(spark: Any, tmp_path: Path) -> None:
    """D' has one more file whose ``day`` (declared Datetime) is a date past 2**63 µs.

    Before, the Spark run over D' stopped (DATETIME_OVERFLOW: exit 4) and the one over D
    did not. Now the value is null (in no cell) as on Polars: the same tables on both
    neighbours and both engines.
    """
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from tabdp.release import load_curator_config, load_spec, run_release

    tables = []
    for name, extra in (("with", True), ("without", False)):
        root = tmp_path / name
        (root / "ds").mkdir(parents=True)
        days = [dt.datetime(2020, 1, 1)] * 10 + [dt.datetime(2021, 1, 1)] * 10
        pq.write_table(pa.table({"estab_id": pa.array(range(20), pa.int64()),
                                 "day": pa.array(days, pa.timestamp("us")),
                                 "v": pa.array(range(20), pa.int64())}), root / "ds" / "a.parquet")
        if extra:
            pq.write_table(pa.table({"estab_id": pa.array([1000], pa.int64()),
                                     "day": pa.array([2**31 - 1], pa.int32()).view(pa.date32()),
                                     "v": pa.array([50], pa.int64())}), root / "ds" / "b.parquet")
        write_curator(root, {"cbp": "ds"}, seeded=True, schemas={"cbp": {
            "estab_id": "Int64", "day": "Datetime", "v": "Int64"}})
        (root / "s.toml").write_text(_DAY_SPEC)
        config = load_curator_config(root / "curator.toml")
        for engine in ("polars", "spark"):
            res = run_release(load_spec(root / "s.toml", curator=config), test_seed=True,
                              overwrite=True, engine=engine,
                              spark=spark if engine == "spark" else None)
            tables.append(pl.read_parquet(res.public / "t.parquet"))
    assert all(t.equals(tables[0]) for t in tables[1:]), tables


#: Microseconds of timestamps without a zone: both ends of the 64-bit range, the first and
#: last day's edges, the epoch.
_FAR_MICROS = [-(2**63), -(2**63) + 1, -(2**63) + 86_400 * 10**6, 2**63 - 1, 0, -1]


@pytest.mark.spark
@pytest.mark.parametrize("ansi", ["true", "false"])
def test_spark_far_naive_timestamps_as_polars(spark: Any, tmp_path: Path, ansi: str) -> None:
    """A timestamp without a zone declared ``Datetime`` (a UTC wall time) or text.

    Before, with ANSI on, the first day of the range (``-2**63`` µs) stopped the job
    (``make_timestamp`` overflowed in its seconds); with ANSI off it was null, not the
    value Polars keeps.
    """
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from pyspark.sql import functions as F

    from tabdp.release.declared import read_declared_spark, scan_declared

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"t": pa.array(_FAR_MICROS, pa.int64()).view(pa.timestamp("us")),
                             "i": pa.array(range(len(_FAR_MICROS)), pa.int64())}), path)
    for declared in (pl.Datetime("us"), pl.String()):
        want = scan_declared(path, {"t": declared, "i": pl.Int64()}).collect().sort("i")
        before = spark.conf.get("spark.sql.ansi.enabled")
        spark.conf.set("spark.sql.ansi.enabled", ansi)
        try:
            got = read_declared_spark(spark, path, {"t": declared, "i": pl.Int64()})
            col = F.unix_micros("t") if declared == pl.Datetime("us") else F.col("t")
            values = [r[0] for r in got.orderBy("i").select(col).collect()]
        finally:
            spark.conf.set("spark.sql.ansi.enabled", before)
        expect = (want["t"].dt.epoch("us") if declared == pl.Datetime("us")
                  else want["t"]).to_list()
        assert values == expect, (declared, values, expect)


# -- 8. bounds outside a declared integer type's range (review r82) ------------------------
@pytest.mark.parametrize(("declared", "arrow", "bounds"), [
    ("Int8", "int8", "[0, 1000]"), ("Int8", "int8", "[500, 1000]"), ("UInt8", "uint8", "[-1, 10]"),
    ("Int32", "int32", "[0, 1e10]"), ("UInt64", "uint64", "[-100, 100]"),
    ("UInt64", "uint64", "[-100, -5]")])
def test_author_run_bounds_beyond_the_declared_integer_type(
        tmp_path: Path, declared: str, arrow: str, bounds: str) -> None:
    """Polars: public bounds outside a declared integer measure's range clip as any others.

    Before, Polars cast the bounds to the measure's type, which failed once the data had a
    row: the run over one record exited 4 (data-dependent failure), over its empty
    neighbour 0. Now both run, and the record's value is clipped (``5`` to the bounds).
    """
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from tabdp.release import load_curator_config, load_spec, run_release

    spec = _DAY_SPEC.replace("[0, 100]", bounds).replace('day = ["2020-01-01 00:00:00", '
                                                          '"2021-01-01 00:00:00"]',
                                                          'day = ["a", "b"]')
    tables = []
    for n in (0, 1):
        root = tmp_path / f"n{n}"
        root.mkdir()
        pq.write_table(pa.table({"estab_id": pa.array(range(n), pa.int64()),
                                 "day": pa.array(["a"] * n, pa.string()),
                                 "v": pa.array([5] * n, getattr(pa, arrow)())}),
                       root / "d.parquet")
        write_curator(root, {"cbp": "d.parquet"}, seeded=True, schemas={"cbp": {
            "estab_id": "Int64", "day": "String", "v": declared}})
        (root / "s.toml").write_text(spec)
        config = load_curator_config(root / "curator.toml")
        res = run_release(load_spec(root / "s.toml", curator=config), test_seed=True,
                          overwrite=True)
        tables.append(pl.read_parquet(res.public / "t.parquet"))
    # (the flag is read from the noisy estimate: a cell clipped to 500 is not flagged C)
    assert tables[0].drop(*NOISY, "flag", strict=False).equals(
        tables[1].drop(*NOISY, "flag", strict=False))


# -- 9. declared unsigned integers on Spark (stop 62) ----------------------------------------
@pytest.mark.spark
def test_spark_converts_to_unsigned_types_as_polars(spark: Any) -> None:
    """`convert_leniently_spark` to UInt8...UInt64 gives `convert_leniently`'s values.

    Edges: above 127 and 255, 2**32, 2**63, 2**64 - 1, negatives, fractions, NaN, text.
    Before, every unsigned declared type raised (Spark has no unsigned type); and the text
    ``-0`` was 0 on Spark, null on Polars, and a decimal 99.99 in a ``decimal(4,2)`` stopped
    the job (ANSI mode: 100 does not fit the cast back; review rev62d).
    """
    from decimal import Decimal

    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from tabdp.frame.backends.spark import local_frame
    from tabdp.release.declared import convert_leniently, convert_leniently_spark

    cases = [
        (pl.Int64, T.LongType(), [0, 127, 128, 200, 255, 256, 65536, 2**32 - 1, 2**32, -1,
                                  2**63 - 1, -(2**63), None]),
        (pl.Float64, T.DoubleType(), [0.0, 2.5, 200.0, 256.0, -1.0, -0.0, float("nan"),
                                      float("inf"), 2.0**53 + 2, 2.0**63, 2.0**63 + 2048,
                                      2.0**64 - 2048, 2.0**64, None]),
        (pl.String, T.StringType(), ["200", "+5", "-1", "256", "18446744073709551615",
                                     "18446744073709551616", "1.0", " 3", "x", "-0", "-00", "+0",
                                     "0012", None]),
        (pl.Boolean, T.BooleanType(), [True, False, None]),
        # a fraction that rounds to a whole number the source's type cannot hold (99.99 ->
        # 100 in decimal(4,2)): Spark's ANSI cast back stopped the job on this one value
        (pl.Decimal(4, 2), T.DecimalType(4, 2), [Decimal("99.99"), Decimal("99.50"),
                                                 Decimal("-99.99"), Decimal("12.00"),
                                                 Decimal("-0.00"), None]),
    ]
    for src, st, values in cases:
        df = pl.DataFrame({"i": range(len(values)), "x": pl.Series(values, dtype=src)})
        sdf = local_frame(spark, df, T.StructType([T.StructField("i", T.LongType()),
                                                   T.StructField("x", st)]))
        for target in (pl.UInt8, pl.UInt16, pl.UInt32, pl.UInt64):
            want = df.select(convert_leniently(pl.col("x"), src, target))["x"].to_list()
            got = [None if r[0] is None else int(r[0]) for r in sdf.orderBy("i").select(
                convert_leniently_spark(F.col("x"), st, target)).collect()]
            assert got == want, (src, target, list(zip(values, want, got, strict=True)))
    # a UInt64 Parquet column (decimal(20,0) on Spark) declared another integer type
    big = [0, 200, 2**64 - 1]
    df = pl.DataFrame({"i": [0, 1, 2], "x": pl.Series(big, dtype=pl.UInt64)})
    sdf = spark.createDataFrame([(i, Decimal(v)) for i, v in enumerate(big)],
                                "i long, x decimal(20,0)")
    for target in (pl.UInt8, pl.UInt64, pl.Int64):
        want = df.select(convert_leniently(pl.col("x"), pl.UInt64, target))["x"].to_list()
        got = [None if r[0] is None else int(r[0]) for r in sdf.orderBy("i").select(
            convert_leniently_spark(F.col("x"), T.DecimalType(20, 0), target)).collect()]
        assert got == want, (target, want, got)


@pytest.mark.spark
def test_spark_author_run_unsigned_declared_columns_as_polars(spark: Any,
                                                              tmp_path: Path) -> None:
    """Declared UInt8 / UInt64 keys, measures and unit ids: Spark's tables are Polars'.

    Neighbouring datasets: D' has one more record whose value is above 127 (UInt8) or
    2**63 (UInt64). Before, every Spark author run with such a declared column stopped
    after reading the data: exit 4, "data-dependent failure", where Polars released the
    tables. Now both engines give the same tables (seeded) on D and on D', and the tables'
    schemas do not depend on the record.
    """
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from tabdp.release import load_curator_config, load_spec, run_release

    for role, arrow, big in (("key", "uint8", 200), ("measure", "uint64", 2**64 - 1),
                             ("unit", "uint64", 2**64 - 1)):
        declared = {"uint8": "UInt8", "uint64": "UInt64"}[arrow]
        got = {}
        for extra in (False, True):
            uid, key, v = list(range(6)), ["a", "b"] * 3, [5] * 6
            types = {"estab_id": pa.int64(), "day": pa.string(), "v": pa.int64()}
            domain = 'day = ["a", "b"]'
            col = {"key": "day", "measure": "v", "unit": "estab_id"}[role]
            types[col] = getattr(pa, arrow)()
            if role == "key":
                key, domain = [1, 2] * 3, "day = [1, 2, 200]"
            if extra:  # the neighbour's one more record
                uid.append(big if role == "unit" else 100)
                key.append(big if role == "key" else key[0])
                v.append(big if role == "measure" else 5)
            root = tmp_path / f"{role}{extra}"
            root.mkdir()
            pq.write_table(pa.table({"estab_id": pa.array(uid, types["estab_id"]),
                                     "day": pa.array(key, types["day"]),
                                     "v": pa.array(v, types["v"])}), root / "d.parquet")
            schema = {"estab_id": "Int64", "day": "String", "v": "Int64", col: declared}
            write_curator(root, {"cbp": "d.parquet"}, seeded=True, schemas={"cbp": schema})
            (root / "s.toml").write_text(
                R15_SPEC.replace('mode = "author"', 'unit = "estab_id"\nmode = "author"')
                .replace('state = ["01", "02"]', domain).replace('by = ["state"]', 'by = ["day"]')
                .replace("[0, 100]", "[0, 300]"))
            config = load_curator_config(root / "curator.toml")
            for engine in ("polars", "spark"):
                res = run_release(load_spec(root / "s.toml", curator=config), test_seed=True,
                                  overwrite=True, engine=engine,
                                  spark=spark if engine == "spark" else None)
                got[(engine, extra)] = [pl.read_parquet(res.public / f"{t}.parquet")
                                        for t in ("t", "n")]
        for extra in (False, True):
            for a, b in zip(got[("polars", extra)], got[("spark", extra)], strict=True):
                assert a.equals(b), (role, extra, a, b)
        for a, b in zip(got[("spark", False)], got[("spark", True)], strict=True):
            assert a.schema == b.schema and a.drop(*NOISY, "flag", strict=False).columns == \
                b.drop(*NOISY, "flag", strict=False).columns, role


@pytest.mark.spark
def test_spark_author_run_decimal_declared_unsigned_no_oracle(spark: Any,
                                                              tmp_path: Path) -> None:
    """A decimal(4,2) column declared UInt8: one record 99.99 does not stop the Spark run.

    Neighbouring datasets, D' with one more record whose value is 99.99. Before (review
    rev62d), its whole number 100 did not fit the cast back to decimal(4,2): under Spark's ANSI
    mode the job stopped, and the author saw exit 4 ("data-dependent failure") on D' and the
    tables on D. Now 99.99 is null (a fraction, as on Polars) and both runs release.
    """
    from decimal import Decimal

    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from tabdp.release import load_curator_config, load_spec, run_release

    got = {}
    for extra in (False, True):
        v = [Decimal("5.00")] * 6 + ([Decimal("99.99")] if extra else [])
        root = tmp_path / f"d{extra}"
        root.mkdir()
        pq.write_table(pa.table({"estab_id": pa.array(range(len(v)), pa.int64()),
                                 "state": pa.array((["01", "02"] * 4)[:len(v)], pa.string()),
                                 "v": pa.array(v, pa.decimal128(4, 2))}), root / "d.parquet")
        write_curator(root, {"cbp": "d.parquet"}, seeded=True,
                      schemas={"cbp": {"estab_id": "Int64", "state": "String", "v": "UInt8"}})
        (root / "s.toml").write_text(
            R15_SPEC.replace('mode = "author"', 'unit = "estab_id"\nmode = "author"')
            .replace("[0, 100]", "[0, 300]"))
        config = load_curator_config(root / "curator.toml")
        res = run_release(load_spec(root / "s.toml", curator=config), test_seed=True,
                          overwrite=True, engine="spark", spark=spark)
        got[extra] = [pl.read_parquet(res.public / f"{t}.parquet").schema for t in ("t", "n")]
    assert got[False] == got[True]
