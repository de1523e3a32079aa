"""``tabdp run --engine spark``: the same release as the Polars engine, run in Spark.

The Spark tests (marker ``spark``; deselect with ``-m "not spark"``) share the local[2] session
of conftest.py and keep to a few small releases: each costs seconds. For one seed, the public
folder of a Spark run must be the Polars run's, byte for byte, and the confidential files the
same tables (per-record losses summed per unit in engine order: within 2 ulps).
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import cli
from tabdp.datasets.synth import generate_establishments
from tabdp.exceptions import SpecError
from tabdp.frame.backends import spark as spark_backend
from tabdp.release.runner import run_release
from tabdp.release.spec import load_spec

ROOT = Path(tabdp.__file__).resolve().parents[1]
HIER = ROOT / "data" / "hierarchies"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _specs import hierarchies  # noqa: E402


def _spec(folder: Path, *, source: str, unit: str, tables: str, extra: str = "") -> Path:
    path = folder / "s.toml"
    path.write_text(f"""
[release]
name = "spark_run"
delta = 1e-9
[input]
{source}
{unit}
{extra}
{hierarchies()}
[randomness]
seed = 17
[output]
public = "out/public"
confidential = "out/confidential"
{tables}
""", encoding="utf-8")
    return path


UNIT_TABLES = """
[budget]
rho = 0.6
[[tables]]
name = "pay"
measures = ["payroll", "employment"]
by = ["state", "naics2"]
mechanism = { family = "gaussian", sigma = 2e5 }
[[tables.rollups]]
by = []
[[tables]]
name = "estabs"
kind = "count"
by = ["naics2"]
mechanism = { family = "discrete_gaussian", sigma = 2.0 }
[[tables.rollups]]
by = []
direct = true
"""

ROW_TABLES = """
[[tables]]
name = "pay"
measures = ["payroll"]
by = ["county"]
mechanism = { family = "log", sigma = 0.3, offset = 1000.0 }
[[tables.rollups]]
by = ["state"]
direct = true
"""


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(args), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".tmp-" in p.name or ".old-" in p.name
                  or ".spark-" in p.name)


def _same_losses(a: pl.DataFrame, b: pl.DataFrame, exact: bool) -> None:
    assert a.columns == b.columns and a.schema == b.schema and a.height == b.height
    assert a[a.columns[0]].to_list() == b[b.columns[0]].to_list()
    for c in a.columns[1:]:
        x, y = a[c].to_numpy(), b[c].to_numpy()
        if exact or c in ("size", "epsilon"):
            np.testing.assert_array_equal(x, y, err_msg=c)
        else:  # a unit's losses in several cells are summed in engine order
            np.testing.assert_allclose(x, y, rtol=5e-16, atol=0, err_msg=c)


def _conf_json(folder: Path) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((folder / "confidential.json").read_text())
    return out


@pytest.mark.spark
def test_cli_engine_spark_gives_the_polars_release(spark: Any, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # one manifest timestamp
    data = generate_establishments(160, seed=3)
    # firms of several establishments (rows) in several cells; the budget leaves some out
    data.write_parquet(tmp_path / "data.parquet")
    spec = _spec(tmp_path, source='path = "data.parquet"', unit='unit = "firm_id"',
                 tables=UNIT_TABLES)
    code, _, err = _run("run", str(spec), "--test-seed", "--quiet")
    assert code == 0, err
    shutil.move(tmp_path / "out", tmp_path / "polars")
    code, out, err = _run("run", str(spec), "--test-seed", "--quiet", "--engine", "spark")
    assert code == 0, err
    assert "done" in out
    ref, got = tmp_path / "polars", tmp_path / "out"
    # the public folder: byte for byte (tables, manifest, summaries, marker)
    assert _files(got / "public") == _files(ref / "public")
    # the confidential folder: the same files, the same counts and losses
    # (plus the JVM's own log lines, kept from the terminal: the curator's spark.log)
    assert sorted(_files(got / "confidential")) == sorted([*_files(ref / "confidential"),
                                                            "spark.log"])
    a, b = _conf_json(ref / "confidential"), _conf_json(got / "confidential")
    assert a["releases"] == b["releases"] and a["units"] == b["units"]
    assert a["input_rules"] == b["input_rules"] and a["warnings"] == b["warnings"] == []
    np.testing.assert_allclose(a["rho_max"], b["rho_max"], rtol=5e-16)
    per = pl.read_parquet(got / "confidential" / "per_record_losses.parquet")
    _same_losses(pl.read_parquet(ref / "confidential" / "per_record_losses.parquet"), per,
                 exact=False)
    assert per.columns[0] == "firm_id" and per["firm_id"].is_sorted()
    assert 0 < (per["rho_pay"] == 0).sum() < per.height  # the budget left some firms out
    wa = pl.read_parquet(ref / "confidential" / "worst_cells.parquet")
    wb = pl.read_parquet(got / "confidential" / "worst_cells.parquet")
    assert wa.select("release", "cell", "units").equals(wb.select("release", "cell", "units"))
    np.testing.assert_allclose(wa["worst_rho"].to_numpy(), wb["worst_rho"].to_numpy(),
                               rtol=5e-16)
    # one Parquet file written by Spark at the Polars engine's file name; nothing else left
    assert _leftovers(tmp_path) == []
    assert (got / "confidential").stat().st_mode & 0o777 == 0o700
    assert {p.stat().st_mode & 0o777 for p in (got / "confidential").iterdir()} == {0o600}


@pytest.mark.spark
def test_row_mode_from_a_catalog_table_with_derived_keys(spark: Any, tmp_path: Path) -> None:
    # each row is a unit (row ids as Spark reads the input); `state` is not in the data, so
    # the direct state release joins the public hierarchy in Spark
    data = generate_establishments(120, seed=4).drop("state")
    data.write_parquet(tmp_path / "data.parquet")
    spark.read.parquet(str(tmp_path / "data.parquet")).createOrReplaceTempView("h30_cbp")
    spec_pl = load_spec(_spec(tmp_path, source='path = "data.parquet"', unit="",
                              tables=ROW_TABLES))
    run_release(spec_pl, test_seed=True)
    shutil.move(tmp_path / "out", tmp_path / "polars")
    (tmp_path / "s.toml").unlink()
    spec_sp = load_spec(_spec(tmp_path, source='table = "h30_cbp"', unit="",
                              tables=ROW_TABLES))
    res = run_release(spec_sp, test_seed=True, engine="spark", spark=spark)
    assert res.files == ["pay.parquet", "pay__state.parquet", "pay__state_direct.parquet",
                         "manifest.json", "summary.json", "summary.html",
                         "NOT_FOR_PUBLICATION.txt"]
    for name in res.files:
        if name.endswith(".parquet"):
            assert pl.read_parquet(res.public / name).equals(
                pl.read_parquet(tmp_path / "polars" / "public" / name)), name
    per = pl.read_parquet(res.confidential / "per_record_losses.parquet")
    _same_losses(pl.read_parquet(tmp_path / "polars" / "confidential" /
                                 "per_record_losses.parquet"), per, exact=True)
    assert per.columns[0] == "row" and per["row"].to_list() == list(range(120))
    assert _conf_json(res.confidential)["releases"] == \
        _conf_json(tmp_path / "polars" / "confidential")["releases"]
    # the manifest names the table; nothing of the data
    manifest = json.loads((res.public / "manifest.json").read_text())
    assert manifest["spec"]["content"]["input"] == {"table": "h30_cbp"}
    # the Polars engine refuses a table input before reading anything
    code, _, err = _run("run", str(tmp_path / "s.toml"), "--test-seed", "--overwrite")
    assert code == 2 and "input.table" in err and "--engine spark" in err
    spark.catalog.dropTempView("h30_cbp")


ROW_BUDGET_TABLES = """
[budget]
rho = 0.6
[[tables]]
name = "pay"
measures = ["payroll"]
by = ["county"]
mechanism = { family = "gaussian", sigma = 2e5 }
[[tables]]
name = "n"
kind = "count"
by = ["state"]
mechanism = { family = "gaussian", sigma = 3.0 }
"""


@pytest.mark.spark
def test_row_mode_under_a_budget_replays_in_spark(spark: Any, tmp_path: Path) -> None:
    # row mode keeps no per-row ledger on Spark: the count's filter reads the sum's losses,
    # replayed in Spark; the report replays both releases (the Polars run streams)
    generate_establishments(150, seed=8).write_parquet(tmp_path / "data.parquet")
    spec = load_spec(_spec(tmp_path, source='path = "data.parquet"', unit="",
                           tables=ROW_BUDGET_TABLES))
    run_release(spec, test_seed=True)
    shutil.move(tmp_path / "out", tmp_path / "polars")
    res = run_release(spec, test_seed=True, engine="spark", spark=spark)
    for name in res.files:
        if name.endswith(".parquet"):
            assert pl.read_parquet(res.public / name).equals(
                pl.read_parquet(tmp_path / "polars" / "public" / name)), name
    ref = tmp_path / "polars" / "confidential"
    per = pl.read_parquet(res.confidential / "per_record_losses.parquet")
    _same_losses(pl.read_parquet(ref / "per_record_losses.parquet"), per, exact=True)
    assert per["row"].to_list() == list(range(150))
    assert (per["rho"] <= 0.6).all() and 0 < (per["rho_pay"] == 0).sum() < 150
    a, b = _conf_json(ref), _conf_json(res.confidential)
    assert a["releases"] == b["releases"] and a["units"] == b["units"]
    assert a["rho_max"] == b["rho_max"]


@pytest.mark.spark
def test_a_failure_while_writing_leaves_nothing(spark: Any, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    generate_establishments(40, seed=5).write_parquet(tmp_path / "data.parquet")
    spec = _spec(tmp_path, source='path = "data.parquet"', unit='unit = "estab_id"',
                 tables='[[tables]]\nname = "n"\nkind = "count"\nby = ["state"]\n')
    real = spark_backend.write_single_parquet

    def written_then_fails(sdf: Any, target: Path, sort_by: str | None = None) -> None:
        real(sdf, target, sort_by)  # Spark has written the per-record file into staging
        assert target.is_file() and ".tmp-" in target.parent.name
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(spark_backend, "write_single_parquet", written_then_fails)
    code, out, err = _run("run", str(spec), "--test-seed", "--engine", "spark")
    assert code == cli.EXIT_DATA and out == ""
    assert "data-dependent failure" in err and "No space" not in err
    assert not (tmp_path / "out" / "public").exists()
    assert [p.name for p in (tmp_path / "out" / "confidential").iterdir()] == ["failure.json"]
    assert _leftovers(tmp_path) == []
    details = json.loads((tmp_path / "out" / "confidential" / "failure.json").read_text())
    assert details["error"] == "OSError"


# -- no Spark needed -------------------------------------------------------------------------
def test_engine_spark_without_pyspark_is_a_usage_error(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    generate_establishments(20, seed=6).write_parquet(tmp_path / "data.parquet")
    spec = _spec(tmp_path, source='path = "data.parquet"', unit="",
                 tables='[[tables]]\nname = "n"\nkind = "count"\nby = ["state"]\n')
    monkeypatch.setitem(sys.modules, "pyspark", None)  # `import pyspark...` raises ImportError
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)
    code, out, err = _run("run", str(spec), "--test-seed", "--engine", "spark")
    assert code == cli.EXIT_USAGE and out == ""
    assert "needs PySpark" in err and "pip install 'tabdp[spark]'" in err
    assert not (tmp_path / "out").exists()  # nothing read or written
    # Spark options need the Spark engine; an unknown engine is refused by argparse
    code, _, err = _run("run", str(spec), "--test-seed", "--spark-master", "local[1]")
    assert code == cli.EXIT_USAGE and "--engine spark" in err
    code, _, _ = _run("run", str(spec), "--test-seed", "--engine", "duckdb")  # argparse
    assert code == cli.EXIT_USAGE
    with pytest.raises(tabdp.InvalidParameterError, match="both an existing"):
        run_release(load_spec(spec), test_seed=True, engine="spark", spark=object(),
                    spark_master="local[1]")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("body", "match"), [
    ('path = "d.parquet"\ntable = "db.t"', "exactly one of 'path'"),
    ('unit = "u"', "exactly one of 'path'"),
    ('table = "db.t; drop"', "input.table"),
    ('table = "db.t"\nhive_partitioning = true', "input.hive_partitioning"),
])
def test_spec_input_table_is_checked(tmp_path: Path, body: str, match: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(f"""
[release]
name = "x"
[input]
{body}
[domains]
c = ["a"]
[output]
public = "o/p"
confidential = "o/c"
[[tables]]
name = "n"
kind = "count"
by = ["c"]
""", encoding="utf-8")
    with pytest.raises(SpecError, match=match):
        load_spec(path)
    (tmp_path / "s.toml").write_text(path.read_text().replace(body, 'table = "lake.db.t"'))
    spec = load_spec(path)
    assert spec.input.table == "lake.db.t" and spec.input.path is None
    code, out, err = _run("validate", str(path))  # nothing to check without Spark
    assert code == 0, err


@pytest.mark.spark
def test_numbered_rows_are_not_recomputed_from_a_changed_input(spark: Any,
                                                               tmp_path: Path) -> None:
    """Review r35: a run's row ids are positions, and every table reads the numbered rows.

    They are a local checkpoint, not a cache: when Spark drops its cached blocks (here
    ``clearCache``, standing in for a lost executor) and the input file has changed since,
    the numbered rows still hold what the first pass read (a cache would be recomputed from the
    new file, and the later tables would charge one row's loss to another's record).
    """
    from tabdp.release import _spark_run as sr

    path = tmp_path / "in.parquet"
    pl.DataFrame({"x": [1.0, 2.0, 3.0]}).write_parquet(path)
    numbered, base = sr.number_rows(spark.read.parquet(str(path)), "__tabdp_row")
    try:
        first = sorted(r["x"] for r in numbered.collect())
        pl.DataFrame({"x": [10.0, 20.0, 30.0]}).write_parquet(path)
        spark.catalog.clearCache()
        assert sorted(r["x"] for r in numbered.collect()) == first == [1.0, 2.0, 3.0]
    finally:
        sr.free_rows(base)


@pytest.mark.spark
def test_input_columns_equal_in_letter_case_refused_with_the_cause(spark: Any,
                                                                  tmp_path: Path) -> None:
    """An input with columns ``y`` and ``Y`` (review rev63k): Spark cannot read it apart.

    Spark's reader refused the file (COLUMN_ALREADY_EXISTS) and the run's failure said the
    input was not Parquet; now the cause and what to do, before any row is read.
    """
    data = generate_establishments(20, seed=3).with_columns(y=pl.lit(1), Y=pl.lit(2))
    data.write_parquet(tmp_path / "data.parquet")
    spec = load_spec(_spec(tmp_path, source='path = "data.parquet"', unit="",
                           tables=ROW_TABLES))
    with pytest.raises(tabdp.TabdpError):
        run_release(spec, test_seed=True, engine="spark", spark=spark)
    failure = _conf_json_named(tmp_path / "out" / "confidential", "failure.json")
    assert failure["error"] == "SpecError"
    assert "differ only in letter case ([['y', 'Y']])" in failure["message"]
    assert "spark.sql.caseSensitive" in failure["message"]


def _conf_json_named(folder: Path, name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((folder / name).read_text())
    return out


@pytest.mark.spark
def test_a_hive_folder_equal_in_letter_case_to_a_column_is_refused_with_the_cause(
        spark: Any, tmp_path: Path) -> None:
    """A folder ``year=2020`` over files with a column ``Year`` (review rev63d).

    The case-sensitive read lists both; the folder's cast to its integer domain then named
    ``year`` in the case-insensitive session, and Spark's AMBIGUOUS_REFERENCE became "cannot
    read the input ... must be a Parquet file": the refusal with the cause came too late.
    """
    data = generate_establishments(20, seed=3).with_columns(Year=pl.lit(7))
    (tmp_path / "data" / "year=2020").mkdir(parents=True)
    data.write_parquet(tmp_path / "data" / "year=2020" / "part.parquet")
    spec = load_spec(_spec(tmp_path, source='path = "data"\nhive_partitioning = true', unit="",
                           tables=ROW_TABLES, extra="[domains]\nyear = [2020, 2021]"))
    with pytest.raises(tabdp.TabdpError):
        run_release(spec, test_seed=True, engine="spark", spark=spark)
    failure = _conf_json_named(tmp_path / "out" / "confidential", "failure.json")
    assert failure["error"] == "SpecError", failure
    assert "differ only in letter case ([['Year', 'year']])" in failure["message"]


@pytest.mark.spark
def test_a_catalog_table_with_an_unknown_letter_is_refused_before_the_data(
        spark: Any, tmp_path: Path) -> None:
    """A catalog table with a column name this Python's Unicode does not know (stop 66).

    Its columns come from the catalog, no data file read; the run stopped in the data phase
    (exit 4, "the run stopped after reading the confidential data") while its failure.json
    said "Nothing was read". Now a spec/usage error before the data phase (exit 2), like a
    missing table; a file input keeps the data phase's refusal, which says no row was read.
    """
    odd = "a" + chr(0x378)
    data = generate_establishments(20, seed=3).with_columns(pl.lit(1).alias(odd))
    data.write_parquet(tmp_path / "data.parquet")
    spark.read.parquet(str(tmp_path / "data.parquet")).createOrReplaceTempView("s66_odd")
    try:
        spec = _spec(tmp_path, source='table = "s66_odd"', unit="", tables=ROW_TABLES)
        code, out, err = _run("run", str(spec), "--test-seed", "--engine", "spark")
        assert code == 2, err
        assert "does not know" in err and "Nothing was written" in err
        assert "data-dependent" not in err and not (tmp_path / "out").exists()
    finally:
        spark.catalog.dropTempView("s66_odd")
    spec = _spec(tmp_path, source='path = "data.parquet"', unit="", tables=ROW_TABLES)
    code, _, err = _run("run", str(spec), "--test-seed", "--engine", "spark")
    assert code == 4 and "data-dependent failure" in err
    failure = _conf_json_named(tmp_path / "out" / "confidential", "failure.json")
    assert failure["error"] == "SpecError" and "does not know" in failure["message"]
    assert "No row was read." in failure["message"] and "Nothing was read" not in \
        failure["message"]


@pytest.mark.spark
def test_a_view_inferring_its_schema_from_records_is_not_said_to_read_nothing(
        spark: Any, tmp_path: Path) -> None:
    """A view over JSON files: Spark reads the records for its schema (review rev66x).

    The stop-66 check of a catalog table's names ran ``spark.table(view).columns``, which for
    ``SELECT * FROM json.`<folder>``` runs a job reading every record (the names are the
    union of the records' keys: here one record's), and the refusal said "Nothing was read
    or written". It now says nothing was written and that such a view is read for its schema.
    """
    odd = "a" + chr(0x378)
    (tmp_path / "j").mkdir()
    lines = generate_establishments(20, seed=3).write_ndjson().splitlines()
    lines[0] = lines[0][:-1] + f', "{odd}": 1}}'  # one record holds the odd key
    (tmp_path / "j" / "part.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW s66_json AS SELECT * FROM "
              f"json.`{(tmp_path / 'j').as_posix()}`")
    sc = spark.sparkContext
    try:
        sc.setJobGroup("rev66x-view", "the view's schema")
        spec = _spec(tmp_path, source='table = "s66_json"', unit="", tables=ROW_TABLES)
        code, _, err = _run("run", str(spec), "--test-seed", "--engine", "spark")
        assert sc.statusTracker().getJobIdsForGroup("rev66x-view")  # the records were read
        assert code == 2 and "does not know" in err, err
        assert "Nothing was read" not in err and "Nothing was written" in err
        assert "infers from their records" in err and not (tmp_path / "out").exists()
    finally:
        sc.setJobGroup("", "")
        spark.catalog.dropTempView("s66_json")


_AUTHOR_VIEW_SPEC = """
[release]
name = "x"
[input]
dataset = "d"
unit = "id"
unit_nulls = "drop"
mode = "author"
nulls = "drop"
negatives = "zero"
nonfinite = "drop"
bounds = { v = [0, 100] }
[domains]
k = ["a", "b"]
[[tables]]
name = "t"
measures = ["v"]
by = ["k"]
mechanism = { family = "gaussian", sigma = 3 }
[randomness]
seed = 7
"""


@pytest.mark.spark
def test_author_view_one_record_with_an_odd_key_runs_as_its_neighbour(
        spark: Any, tmp_path: Path) -> None:
    """Author mode, a catalog view over JSON: one record's undeclared key (review rev66x).

    The view's columns are the union of its records' keys. Every column of the table was
    checked with the input, so one record holding a key this Python's Unicode does not know
    stopped the run (exit 4, "data-dependent failure") where its neighbour without that
    record released. Only declared columns are read now.
    """
    key = "a" + chr(0x378)
    views = []
    recs = [{"id": i, "k": "ab"[i % 2], "v": i % 7} for i in range(40)]
    for name, extra in (("without", {}), ("with", {key: 1})):
        d = tmp_path / name
        (d / "j").mkdir(parents=True)
        (d / "pub").mkdir()
        rows = [dict(r) for r in recs]
        rows[0].update(extra)
        (d / "j" / "p.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n",
                                        encoding="utf-8")
        spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW rev66x_{name} AS SELECT * FROM "
                  f"json.`{(d / 'j').as_posix()}`")
        (d / "curator.toml").write_text(
            f'[datasets.d]\ntable = "rev66x_{name}"\n'
            'schema = { "id" = "Int64", "k" = "String", "v" = "Int64" }\n'
            f'[public]\nfolders = ["{(d / "pub").as_posix()}"]\n'
            f'[output]\nroot = "{(d / "releases").as_posix()}"\n'
            "[testing]\nseeded_author_runs = true\n", encoding="utf-8")
        (d / "s.toml").write_text(_AUTHOR_VIEW_SPEC, encoding="utf-8")
        try:
            code, out, err = _run("run", str(d / "s.toml"), "--curator",
                                  str(d / "curator.toml"), "--engine", "spark", "--test-seed")
        finally:
            spark.catalog.dropTempView(f"rev66x_{name}")
        public = pl.read_parquet(d / "releases" / "x" / "public" / "t.parquet") \
            if code == 0 else None
        views.append((code, err.replace(str(d), "<D>"), public))
    assert views[0][0] == views[1][0] == 0, views
    assert views[0][1] == views[1][1]
    assert views[0][2] is not None and views[0][2].equals(views[1][2])
