"""Key dtype pairs the kinds rule of stop 64 left open (stop 65).

1. Author mode converts a key column from its declared type to its domain's type before the
   engine compares keys, and that conversion skipped the kinds rule: a Boolean column against
   a decimal domain (a Parquet domain file) ran when every record's key was null and stopped
   with the data-dependent failure (exit 4) once one record held a value, so the exit code
   told whether such a record existed; against an integer domain ``True`` was matched as
   ``1``. The rule now applies to the declared dtypes, before any data is read.
2. A key set of nulls only (dtype ``Null``) was refused against dates, decimals, Categorical
   and others (Polars casts nothing of them to ``Null``) and accepted against integers or
   text; on Spark always refused. It now goes with every dtype: its null key matches the rows
   whose key is null, no other.
3. Bytes data was compared with String keys but refused against Categorical or Enum keys
   (and the reverse). Text of any text dtype is now compared with bytes as String is.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl
import pytest

import tabdp
from tabdp import cli
from tabdp.exceptions import ColumnTypeError
from tabdp.mechanisms import Gaussian

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _curator import write_curator  # noqa: E402
from _specs import author_input  # noqa: E402

TINY = Gaussian(1e-4)  # nearly noiseless: estimates are checked to two decimals

SPEC = """
[release]
name = "kinds"
""" + author_input("v = [0, 100]", unit="id", template=True) + """{domain}
[[tables]]
name = "t"
measures = ["v"]
by = ["owned"]
{keys}
mechanism = {{ family = "gaussian", sigma = 3 }}
[randomness]
seed = 7
"""


def _server(root: Path, owned: list[Any], domain: Any, *, keys_file: bool = False
            ) -> tuple[int, str, str]:
    """An author-mode run of SPEC on a dataset whose Boolean key column holds ``owned``.

    ``domain``: the inline domain's text, or an Arrow array (a Parquet file in a public
    folder): the domain, or with ``keys_file`` the table's allowed keys (no domain).
    """
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    (root / "ds").mkdir(parents=True)
    (root / "pub").mkdir()
    pq.write_table(pa.table({"id": pa.array(range(len(owned)), pa.int64()),
                             "owned": pa.array(owned, pa.bool_()),
                             "v": pa.array([1] * len(owned), pa.int64())}),
                   root / "ds" / "a.parquet")
    if isinstance(domain, str):
        text = domain
    else:
        pq.write_table(pa.table({"owned": domain}), root / "pub" / "dom.parquet")
        text = '{ file = "dom.parquet" }'
    write_curator(root, {"d": "ds"}, public=[root / "pub"], seeded=True,
                  schemas={"d": {"id": "Int64", "owned": "Boolean", "v": "Int64"}})
    spec = (SPEC.format(domain="", keys=f"keys = {text}") if keys_file
            else SPEC.format(domain=f"[domains]\nowned = {text}", keys=""))
    (root / "s.toml").write_text(spec, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["run", str(root / "s.toml"), "--curator", str(root / "curator.toml"),
                     "--overwrite", "--test-seed"], stdout=out, stderr=err)
    return code, out.getvalue().replace(str(root), "<R>"), err.getvalue().replace(str(root), "<R>")


@pytest.mark.parametrize("domain", ["decimal", "integer", "keys-file"])
def test_author_key_of_another_kind_is_refused_before_any_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, domain: str) -> None:
    """Neighbours: five records with a null key, and one more holding ``True``.

    Before: against a decimal domain file the first ran (exit 0) and the second stopped with
    exit 4 (Polars casts no Boolean to a decimal, which it finds only on a value); against
    the inline domain ``[0, 1]`` both ran and ``True`` was published as the cell ``1``;
    against an allowed-keys file of integers (no domain) validation skipped the pair and
    both runs stopped with the data-dependent failure (exit 4), decided from the types.
    """
    pa = pytest.importorskip("pyarrow")
    dom: Any = {"decimal": pa.array([decimal.Decimal(0), decimal.Decimal(1)],
                                    pa.decimal128(5, 0)),
                "integer": "[0, 1]", "keys-file": pa.array([0, 1], pa.int64())}[domain]
    monkeypatch.chdir(tmp_path)
    views = [_server(tmp_path / name, [None] * 5 + extra, dom, keys_file=domain == "keys-file")
             for name, extra in (("without", []), ("with", [True]))]
    assert views[0] == views[1], views
    code, _, err = views[0]
    assert code == 2, views[0]
    where = "tables[0].keys" if domain == "keys-file" else "tables[0].by[0]"
    assert where in err and "cannot compare" in err and "same kind" in err
    assert "Boolean" in err and ("Decimal" in err or "Int64" in err) and "Hint:" in err
    assert "no data was read" in err
    # a spec's author cannot run Python: the hint says what to change in the spec (stop 66)
    hint = err.split("Hint:", 1)[1]
    assert "pl." not in err and "curator" in hint and "[true, false]" in hint, err
    assert not (tmp_path / "with" / "releases").exists()


def test_author_key_casts_refuse_other_kinds_from_the_dtypes() -> None:
    """The run's own conversion refuses the pair too (from the dtypes, any frame)."""
    from types import SimpleNamespace

    from tabdp.release._input import _author_key_casts

    spec = SimpleNamespace(tables=[SimpleNamespace(by=("k",))],
                           domains={"k": pl.Series("k", [0, 1])})
    for lf in (pl.LazyFrame({"k": [True, None]}),
               pl.LazyFrame({"k": []}, schema={"k": pl.Boolean})):
        with pytest.raises(ColumnTypeError, match="same kind"):
            _author_key_casts(spec, lf)  # type: ignore[arg-type]


def test_author_text_key_against_a_bytes_domain_is_its_bytes() -> None:
    """A declared String key against a bytes domain: compared as bytes, as on the engine.

    Before: the declared conversion had no text-to-bytes case and made every key null, so
    every record fell outside the key set.
    """
    from types import SimpleNamespace

    from tabdp.release._input import _author_key_casts

    spec = SimpleNamespace(tables=[SimpleNamespace(by=("k",))],
                           domains={"k": pl.Series("k", [b"a", "é".encode()])})
    out = _author_key_casts(spec, pl.LazyFrame({"k": ["a", "é", None]}))  # type: ignore[arg-type]
    assert out.collect()["k"].to_list() == [b"a", "é".encode(), None]


@pytest.mark.spark
def test_spark_author_key_casts_refuse_other_kinds(spark: Any) -> None:
    """Spark's author-mode conversion takes the same rule (Spark casts true to 1)."""
    from tabdp.release._spark_run import author_key_casts

    sdf = spark.sql("select true as k union all select cast(null as boolean)")
    with pytest.raises(ColumnTypeError, match="same kind"):
        author_key_casts(sdf, ["k"], {"k": pl.Series("k", [0, 1])})


# -- 2. key sets of nulls only -------------------------------------------------------------
NULL_DATA = {
    "Int64": pl.Series([1, None], dtype=pl.Int64),
    "Decimal": pl.Series([1, None]).cast(pl.Decimal(10, 2)),
    "String": pl.Series(["a", None]),
    "Categorical": pl.Series(["a", None], dtype=pl.Categorical),
    "Enum": pl.Series(["a", None], dtype=pl.Enum(["a"])),
    "Binary": pl.Series([b"a", None]),
    "Boolean": pl.Series([True, None]),
    "Date": pl.Series([dt.date(2020, 1, 1), None]),
    "Datetime": pl.Series([dt.datetime(2020, 1, 1), None]).dt.replace_time_zone("Asia/Tokyo"),
    "Duration": pl.Series([dt.timedelta(1), None]),
    "Time": pl.Series([dt.time(1), None]),
    "List": pl.Series([[1], None]),
}
NULL_KEYS = tabdp.KeySet.from_frame(pl.DataFrame({"k": pl.Series([None], dtype=pl.Null)}))


@pytest.mark.parametrize("name", list(NULL_DATA))
def test_a_key_set_of_nulls_matches_null_keys_of_any_dtype(name: str) -> None:
    """Before: refused for Decimal, Categorical, Enum, Date, Datetime, Duration, Time, List."""
    df = pl.DataFrame({"k": NULL_DATA[name], "x": [2.0, 3.0]})
    frames: list[Any] = [df, df.lazy()]
    if name in ("Date", "Categorical", "Int64", "Binary"):
        frames.append(df.to_pandas(use_pyarrow_extension_array=name == "Date"))
    for frame in frames:
        s = tabdp.Session(seed=1)
        out = frame.dp.sum("x", by="k", keys=NULL_KEYS, mechanism=TINY, session=s)
        out = out.collect() if isinstance(out, pl.LazyFrame) else out
        assert [round(v, 2) for v in list(out["x"])] == [3.0], (name, type(frame))
        assert s.report().confidential_summary()["queries"][0]["rows_outside_keys"] == 1


@pytest.mark.spark
def test_spark_a_key_set_of_nulls_matches_null_keys(spark: Any) -> None:
    """Spark: the same (before: every key set of nulls was refused).

    Interval columns are refused as against any key set (Spark holds no interval keys).
    """
    for value, kind in (("1L", "bigint"), ("date'2020-01-01'", "date"),
                        ("1.5bd", "decimal(2,1)"), ("'a'", "string"), ("X'FF'", "binary"),
                        ("timestamp_ntz'2020-01-01 00:00:00'", "timestamp_ntz"),
                        ("true", "boolean")):
        sdf = spark.sql(f"select {value} as k, 2.0d as x union all "
                        f"select cast(null as {kind}), 3.0d")
        s = tabdp.Session(seed=1)
        out = sdf.dp.sum("x", by="k", keys=NULL_KEYS, mechanism=TINY, session=s)
        assert [round(r["x"], 2) for r in out.collect()] == [3.0], kind
    interval = spark.sql("select make_dt_interval(0, 0, 0, 1) as k, 2.0d as x")
    with pytest.raises(ColumnTypeError, match="not supported on Spark"):
        interval.dp.sum("x", by="k", keys=NULL_KEYS, mechanism=TINY,
                        session=tabdp.Session(seed=1))


# -- 3. bytes against every text dtype -----------------------------------------------------
TEXT_DTYPES = [pl.String, pl.Categorical, pl.Enum(["a", "b", "é"])]


@pytest.mark.parametrize("text", TEXT_DTYPES, ids=str)
def test_bytes_data_against_text_keys_of_any_text_dtype(text: Any) -> None:
    """Before: Categorical and Enum keys were refused where String keys were compared."""
    df = pl.DataFrame({"k": pl.Series([b"a", b"\xff", "é".encode(), None]),
                       "x": [1.0, 2.0, 4.0, 8.0]})
    keys = tabdp.KeySet.from_frame(pl.DataFrame({"k": pl.Series(["a", "b", "é"]).cast(text)}))
    for frame in (df, df.lazy(), df.to_pandas()):
        s = tabdp.Session(seed=1)
        out = frame.dp.sum("x", by="k", keys=keys, mechanism=TINY, session=s)
        out = out.collect() if isinstance(out, pl.LazyFrame) else out
        assert [round(v, 2) for v in list(out["x"])] == [1.0, 0.0, 4.0]
        assert s.report().confidential_summary()["queries"][0]["rows_outside_keys"] == 2


@pytest.mark.parametrize("text", TEXT_DTYPES, ids=str)
def test_text_data_of_any_text_dtype_against_bytes_keys(text: Any) -> None:
    """Before: Categorical and Enum data were refused against bytes keys, String data not."""
    df = pl.DataFrame({"k": pl.Series(["a", "é", "b", None]).cast(text),
                       "x": [1.0, 2.0, 4.0, 8.0]})
    keys = tabdp.KeySet.from_dict(k=[b"a", b"\xff", "é".encode()])
    frames: list[Any] = [df, df.lazy()]
    if text != pl.Enum(["a", "b", "é"]):
        frames.append(df.to_pandas())
    for frame in frames:
        s = tabdp.Session(seed=1)
        out = frame.dp.sum("x", by="k", keys=keys, mechanism=TINY, session=s)
        out = out.collect() if isinstance(out, pl.LazyFrame) else out
        assert [round(v, 2) for v in list(out["x"])] == [1.0, 0.0, 2.0]
        assert list(out["k"]) == [b"a", b"\xff", "é".encode()]
        assert s.report().confidential_summary()["queries"][0]["rows_outside_keys"] == 2


def test_pandas_nullable_text_and_bytes_follow_the_same_rule() -> None:
    """pandas: category, string[pyarrow] and Arrow bytes columns, as their Polars twins."""
    pa = pytest.importorskip("pyarrow")
    cols = {"category": pd.Categorical(["a", None]),
            "string": pd.array(["a", None], dtype="string[pyarrow]"),
            "bytes": pd.array([b"a", None], dtype=pd.ArrowDtype(pa.binary()))}
    key_sets = [tabdp.KeySet.from_frame(pl.DataFrame({"k": pl.Series(["a"]).cast(t)}))
                for t in TEXT_DTYPES] + [tabdp.KeySet.from_dict(k=[b"a"]), NULL_KEYS]
    for name, col in cols.items():
        df = pd.DataFrame({"k": col, "x": [2.0, 3.0]})
        for i, keys in enumerate(key_sets):
            out = df.dp.sum("x", by="k", keys=keys, mechanism=TINY,
                            session=tabdp.Session(seed=1))
            want = [3.0] if keys is NULL_KEYS else [2.0]
            assert [round(v, 2) for v in out["x"]] == want, (name, i)


_TZ_SPEC = """
[release]
name = "zones"
[input]
path = "in.parquet"
bounds = {{ v = [0, 100] }}
[domains]
k = {{ file = "dom.parquet" }}
[[tables]]
name = "t"
measures = ["v"]
by = ["k"]
{keys}
mechanism = {{ family = "gaussian", sigma = 3 }}
[output]
public = "pub"
confidential = "conf"
"""


@pytest.mark.parametrize(("data", "public", "keys_file", "want", "not_want"), [
    (pl.Datetime("us", "Asia/Tokyo"), pl.Datetime("us"), False,
     "timestamps in the column's time zone ('Asia/Tokyo')", "own kind"),
    (pl.Datetime("us"), pl.Datetime("us", "America/New_York"), False,
     "timestamps without a time zone", "own kind"),
    (pl.Datetime("us"), pl.Datetime("us", "America/New_York"), True,
     "timestamps without a time zone", "own kind"),
    (pl.List(pl.String), pl.String, False, "nested column (List, Array, Struct) cannot key",
     "Parquet file of that type"),
    (pl.Boolean, pl.Int64, False, "[true, false]", "time zone"),
])
def test_spec_key_refusal_hint_fits_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: Any, public: Any,
        keys_file: bool, want: str, not_want: str) -> None:
    """A time zone on one side, or a nested column, gets a hint a spec can follow (rev66x).

    Before, every key-kind refusal (stop 66) told the author to give the public values "in the
    key column's own kind" or as "a Parquet file of that type": timestamps against timestamps
    are of one kind (the zone differs), and a nested domain is refused by the spec itself.
    """
    from tabdp.exceptions import SpecError
    from tabdp.release.input_schema import check_input_schema
    from tabdp.release.spec import load_spec

    monkeypatch.chdir(tmp_path)
    values = (pl.Series("k", [True, False]) if public == pl.Boolean
              else pl.Series("k", [1, 2], dtype=public) if public == pl.Int64
              else pl.Series("k", ["a"], dtype=public) if public == pl.String
              else pl.Series("k", [dt.datetime(2020, 1, 1)]).cast(pl.Datetime("us"))
              .dt.replace_time_zone(public.time_zone))
    pl.DataFrame([values]).write_parquet(tmp_path / "dom.parquet")
    text = _TZ_SPEC.format(keys='keys = { file = "dom.parquet" }' if keys_file else "")
    if keys_file:
        text = text.replace('[domains]\nk = { file = "dom.parquet" }\n', "")
    (tmp_path / "s.toml").write_text(text, encoding="utf-8")
    spec = load_spec(tmp_path / "s.toml")
    with pytest.raises(SpecError) as err:
        check_input_schema(spec, {"k": data, "v": pl.Int64})
    msg = str(err.value)
    assert ("tables[0].keys" if keys_file else "tables[0].by[0]") in msg
    hint = msg.split("Hint:", 1)[1]
    assert want in hint and not_want not in hint and "pl." not in msg, msg
    assert "no data was read" in msg
