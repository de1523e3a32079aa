"""Every level of a table is the statistic of one population (review r55, F2).

A ``direct = true`` release of a level reads only the rows whose finest keys (the table's
``by``) are in the table's key set: the rows the table itself counts. A row with a county
outside the hierarchy's code list, a null county or a sector outside the domain was counted
(and charged) in the national and state direct releases although no county cell held it, so a
direct level estimated a larger total than its finest cells, and the consistent estimate mixed
the two. On D plus such rows every released value is the one released on D alone.
"""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import tabdp
from tabdp.datasets.synth import generate_establishments
from tabdp.exceptions import CoverageWarning, SpecError
from tabdp.release.runner import run_release
from tabdp.release.spec import load_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _curator import run_cli, write_curator  # noqa: E402
from _specs import hierarchies, rollups  # noqa: E402
from _specs import table as table_block  # noqa: E402

HIER = Path(tabdp.__file__).resolve().parents[1] / "data" / "hierarchies"

_GAUSS = '{ family = "gaussian", sigma = 10.0 }'
_DIRECT = rollups([], ["state"], direct=True)
TABLES = "\n" + "".join([
    table_block("pay", ["county", "naics2"], _GAUSS, measures=["payroll"], extra=_DIRECT),
    table_block("cpay", ["county", "naics2"], _GAUSS, measures=["payroll"],
                extra=f"consistent = true\n{_DIRECT}"),
    table_block("cn", ["county", "naics2"], '{ family = "discrete_gaussian", sigma = 2.0 }',
                kind="count", extra=rollups(["state", "naics2"], [], direct=True))])

#: The releases of `TABLES` that read the input (the table, then its direct levels).
RELEASES = {"pay": ["pay", "pay__national", "pay__state"],
            "cpay": ["cpay", "cpay__national", "cpay__state"],
            "cn": ["cn", "cn__state_naics2", "cn__national"]}


def _base() -> pl.DataFrame:
    return generate_establishments(300, seed=3).select(
        "estab_id", "state", "county", "naics2", "payroll")


def _outside(base: pl.DataFrame) -> pl.DataFrame:
    """Rows in no cell of any table, new units with large payrolls.

    A county outside the hierarchy (its state known), a null county, a sector outside the
    domain (in a valid county).
    """
    one = base.head(1)
    return pl.concat([
        one.with_columns(pl.lit(10**6, pl.Int64).alias("estab_id"), pl.lit("01999").alias("county"),
                         pl.lit("01").alias("state"), pl.lit(5e6).alias("payroll")),
        one.with_columns(pl.lit(10**6 + 1, pl.Int64).alias("estab_id"),
                         pl.lit(None, pl.String).alias("county"), pl.lit(4e6).alias("payroll")),
        one.with_columns(pl.lit(10**6 + 2, pl.Int64).alias("estab_id"),
                         pl.lit("99").alias("naics2"), pl.lit(3e6).alias("payroll")),
    ])


def _spec_text(source: str, unit: str, extra: str = "") -> str:
    return f"""
[release]
name = "dp"
[input]
{source}
{unit}
{extra}
{hierarchies()}
[randomness]
seed = 23
{TABLES}
"""


def _public_tables(folder: Path) -> dict[str, pl.DataFrame]:
    return {p.name: pl.read_parquet(p) for p in sorted(folder.glob("*.parquet"))}


def _curator_run(folder: Path, data: pl.DataFrame, unit: str | None) -> Any:
    folder.mkdir(parents=True)
    data.write_parquet(folder / "data.parquet")
    (folder / "s.toml").write_text(
        _spec_text('path = "data.parquet"', f'unit = "{unit}"' if unit else "")
        + '[output]\npublic = "out/public"\nconfidential = "out/confidential"\n',
        encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = run_release(load_spec(folder / "s.toml"), test_seed=True)
    _coverage_warned(caught, data.height > 300)
    return res


def _coverage_warned(caught: list[Any], outside: bool) -> None:
    """The curator's coverage warning: on D + outside only, naming every direct release."""
    texts = [str(w.message) for w in caught if issubclass(w.category, CoverageWarning)]
    assert [str(w.message) for w in caught
            if not issubclass(w.category, CoverageWarning)] == []
    if not outside:
        assert texts == []
        return
    assert len(texts) == 1
    named = texts[0].split("key set of ", 1)[1].split(" and are not", 1)[0].split(", ")
    assert named == [n for names in RELEASES.values() for n in names], texts[0]


@pytest.mark.parametrize("state", ["in_the_input", "derived"])
@pytest.mark.parametrize("unit", ["estab_id", None])
def test_direct_levels_release_the_tables_population(tmp_path: Path, unit: str | None,
                                                     state: str) -> None:
    """Curator mode, units or rows (the streaming session), state read or derived."""
    base = _base()
    data = pl.concat([base, _outside(base)])
    if state == "derived":
        base, data = base.drop("state"), data.drop("state")
    ref = _curator_run(tmp_path / "D", base, unit)
    got = _curator_run(tmp_path / "X", data, unit)
    a, b = _public_tables(Path(ref.public)), _public_tables(Path(got.public))
    assert sorted(a) == sorted(b)
    assert "pay__national_direct.parquet" in a and "cpay__state.parquet" in a
    for name in a:
        assert a[name].equals(b[name]), name
    # the extra rows are charged nothing: the same per-record losses
    per = [pl.read_parquet(Path(r.confidential) / "per_record_losses.parquet")
           for r in (ref, got)]
    ids = per[0].columns[0]
    assert per[0].equals(per[1].filter(pl.col(ids).is_in(per[0][ids].implode())))
    extra = per[1].filter(~pl.col(ids).is_in(per[0][ids].implode()))
    assert extra.height in (0, 3)  # rows (row mode lists every row read) or units
    assert (extra.select(pl.col("^rho.*$")).to_numpy() == 0).all()
    # every level of a table counts the same rows; the coverage warning names them all
    conf = json.loads((Path(got.confidential) / "confidential.json").read_text())
    counts = conf["coverage"]["counts"]
    for table, names in RELEASES.items():
        assert {n for n in counts if n in names} == set(names), table
        assert len({counts[n]["rows_in_released_cells"] for n in names}) == 1, table
        assert len({counts[n]["rows_outside_keys"] for n in names}) == 1, table
    assert counts["pay"]["rows_in_released_cells"] == 300
    assert counts["pay"]["rows_outside_keys"] == counts["cn"]["rows_outside_keys"] == 3
    # the direct national total and the rollup estimate the same population
    pub = Path(got.public)
    direct = pl.read_parquet(pub / "pay__national_direct.parquet")["estimate"][0]
    rolled = pl.read_parquet(pub / "pay__national.parquet")["estimate"][0]
    assert abs(direct - rolled) < 5 * 760  # sd 10 and about 755 (before: 12e6 apart)


def test_author_mode_direct_levels_ignore_rows_outside(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Author mode (the CLI on a curator's server): the same outputs on D and D + outside."""
    base = _base()
    views = []
    for name, data in (("D", base), ("X", pl.concat([base, _outside(base)]))):
        root = tmp_path / name
        (root / "ds").mkdir(parents=True)
        data.write_parquet(root / "ds" / "a.parquet")
        write_curator(root, {"cbp": "ds"}, public=[HIER],
                      schemas={"cbp": {"estab_id": "Int64", "state": "String",
                                       "county": "String", "naics2": "String",
                                       "payroll": "Float64"}},
                      dataset_extra={"cbp": 'unit = "estab_id"'})
        text = _spec_text('dataset = "cbp"\nmode = "author"', "",
                          'nulls = "drop"\nnegatives = "zero"\nnonfinite = "drop"\n'
                          'unit_nulls = "drop"\nbounds = { payroll = [0, 1e7] }')
        text = text.replace(f"{HIER.as_posix()}/", "")
        (root / "s.toml").write_text(text, encoding="utf-8")
        monkeypatch.chdir(root)
        code, out, err = run_cli(root, "run")
        assert code == 0, err
        views.append((out.replace(str(root), ""), err,
                      _public_tables(root / "releases" / "dp" / "public")))
    assert views[0][0] == views[1][0] and views[0][1] == views[1][1]
    a, b = views[0][2], views[1][2]
    assert sorted(a) == sorted(b) and "cpay__national.parquet" in a
    for name in a:
        assert a[name].equals(b[name]), name


@pytest.mark.spark
def test_spark_direct_levels_release_the_tables_population(spark: Any, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """``--engine spark`` on D + outside: the Polars release of D, table for table."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    base = _base().drop("state")  # the state levels' keys derived through the hierarchy
    ref = _curator_run(tmp_path / "D", base, "estab_id")
    folder = tmp_path / "X"
    folder.mkdir()
    pl.concat([base, _outside(_base()).drop("state")]).write_parquet(folder / "data.parquet")
    shutil.copy(tmp_path / "D" / "s.toml", folder / "s.toml")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = run_release(load_spec(folder / "s.toml"), test_seed=True, engine="spark",
                          spark=spark)
    _coverage_warned([w for w in caught if "PySpark" not in str(w.message)], True)
    a, b = _public_tables(Path(ref.public)), _public_tables(Path(got.public))
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].equals(b[name]), name
    conf = json.loads((Path(got.confidential) / "confidential.json").read_text())
    counts = conf["coverage"]["counts"]
    for table, names in RELEASES.items():
        assert len({counts[n]["rows_in_released_cells"] for n in names}) == 1, table


@pytest.mark.parametrize("name", ["_tabdp_national_in0", "_TABDP_National_In12"])
def test_membership_column_names_are_refused(tmp_path: Path, name: str) -> None:
    """The run's membership columns (``_tabdp_national_in<n>``) name no input column."""
    (tmp_path / "s.toml").write_text(
        _spec_text('path = "data.parquet"', f'unit = "{name}"')
        + '[output]\npublic = "out/public"\nconfidential = "out/confidential"\n',
        encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "s.toml")
    assert info.value.path == "input.unit" and "membership column" in str(info.value)
    assert "_tabdp_national_in<n>" in str(info.value)
