"""Lifetime ledgers on the Spark engine (issue 31): the same series as on Polars.

The ledger's totals are joined to the units in Spark, the filter is
`tabdp.privacy.filter.individual_filter` again (ANDed with the per-run budget's) and each
release's admitted losses are charged to the same `tabdp.Ledger`. A series run on Spark must
give, for one seed, the Polars series: the same tables, the same units admitted and left out,
the same per-unit lifetime losses, the same ledger state.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech
from tabdp.cli import main as cli_main

pytest.importorskip("deltalake")

from _ledger_specs import COUNTIES, series_spec  # noqa: E402  (tests/ is on sys.path)

KEYS = tabdp.KeySet.from_dict(county=COUNTIES)
SUM = mech.Gaussian(sigma=40.0)
COUNT = mech.Gaussian(sigma=2.0)
LIFETIME = 3.0
TARGET = 9999  # in every year: 1.125 (sum) + 0.125 (count) a run: out of the third sum


def year_sample(year: int, n: int = 60) -> pl.DataFrame:
    """Units enter and leave (10 a year), every 7th has two rows, unit 9999 in every year."""
    rng = np.random.default_rng(year)
    first = 10 * (year - 2020)
    ids = np.arange(first, first + n)
    ids = np.concatenate([ids, ids[::7]])
    df = pl.DataFrame({"estab": ids.astype(np.int64), "county": np.array(COUNTIES)[ids % 3],
                       "payroll": np.round(rng.lognormal(3.0, 1.0, ids.size), 2)})
    return pl.concat([df, pl.DataFrame({"estab": [TARGET], "county": ["c1"],
                                        "payroll": [60.0]})])


def _run_year(frame: Any, led: tabdp.Ledger, year: int, budget: Any = None
              ) -> tuple[tabdp.Session, list[pl.DataFrame]]:
    s = tabdp.Session(unit="estab", seed=year, ledger=led, budget=budget)
    t1 = frame.dp.sum("payroll", by="county", keys=KEYS, mechanism=SUM, session=s, name="pay")
    t2 = frame.dp.count(by="county", keys=KEYS, mechanism=COUNT, session=s, name="n")
    return s, [_polars(t) for t in (t1, t2)]


def _polars(t: Any) -> pl.DataFrame:
    if isinstance(t, pl.DataFrame):
        return t
    out = pl.from_arrow(t.toArrow())
    assert isinstance(out, pl.DataFrame)
    return out


def _series(path: Path, spark: Any | None, lifetime: Any = LIFETIME, budget: Any = None,
            years: range = range(2021, 2024), text_ids: bool = False
            ) -> tuple[list[pl.DataFrame], list[list[Any]]]:
    """The per-record reports and tables of a series run on Polars (``spark=None``) or Spark."""
    reports, tables = [], []
    for year in years:
        df = year_sample(year)
        if text_ids:
            df = df.with_columns(pl.col("estab").cast(pl.String))
        frame = df if spark is None else spark.createDataFrame(df.to_arrow())
        with tabdp.Ledger.open(path, series="s", lifetime_budget=lifetime, create=True) as led:
            s, out = _run_year(frame, led, year, budget)
            pr = _polars(s.report().per_record).sort("estab")
        reports.append(pr)
        tables.append(out)
    return reports, tables


@pytest.mark.spark
def test_a_three_run_series_on_spark_is_the_polars_series(spark: Any, tmp_path: Path) -> None:
    ref_pr, ref_t = _series(tmp_path / "pl", None)
    got_pr, got_t = _series(tmp_path / "sp", spark)
    for a, b in zip(ref_t, got_t, strict=True):  # the same tables (the same noise)
        for x, y in zip(a, b, strict=True):
            assert x.equals(y), (x, y)
    for year, (a, b) in enumerate(zip(ref_pr, got_pr, strict=True), start=2021):
        assert "rho_lifetime" in b.columns and b.columns == a.columns, b.columns
        assert a["estab"].to_list() == b["estab"].to_list()  # the same units admitted
        for c in ("rho", "rho_pay", "rho_n", "rho_lifetime"):
            np.testing.assert_allclose(b[c].to_numpy(), a[c].to_numpy(), rtol=1e-12, atol=0,
                                       err_msg=f"{year} {c}")
    # unit 9999 is charged 1.25 in 2021 and 2022; in 2023 the sum would take it to 3.625 > 3:
    # left out of it on Spark (the count, 0.125, still fits)
    target = pl.concat([pr.filter(pl.col("estab") == TARGET) for pr in got_pr])
    assert target["rho_pay"].to_list() == pytest.approx([1.125, 1.125, 0.0])
    assert target["rho_n"].to_list() == pytest.approx([0.125, 0.125, 0.125])
    assert target["rho_lifetime"].to_list() == pytest.approx([1.25, 2.5, 2.625])
    # the ledgers hold the same state and the same history
    with tabdp.Ledger.open(tmp_path / "pl") as la, tabdp.Ledger.open(tmp_path / "sp") as lb:
        assert la.releases == lb.releases == 6  # autocommit: one entry per release
        sa, sb = la.state().sort("unit"), lb.state().sort("unit")
        assert sa.columns == sb.columns and sa["unit"].equals(sb["unit"])
        for c in sa.columns[1:]:
            np.testing.assert_allclose(sb[c].to_numpy(), sa[c].to_numpy(), rtol=1e-12,
                                       err_msg=c)
        assert sb["rho"].max() <= LIFETIME
        assert la.history().height == lb.history().height
        # the same public entries (names and curves: one ledger code for every engine)
        assert la.releases_public() == lb.releases_public()
        assert la.public() == lb.public()


@pytest.mark.spark
def test_curve_lifetime_budget_and_per_run_budget_on_spark(spark: Any, tmp_path: Path) -> None:
    """A curve lifetime budget (per currency) and a per-run budget: both filters, as Polars.

    With text unit ids (the ledger keys them as String).
    """
    curve = {"payroll": {10.0: 0.5, 1e4: 2.0}, "rows": {1: 1.5}}
    years = range(2021, 2023)
    ref, _ = _series(tmp_path / "pl", None, lifetime=curve, budget=1.2, years=years,
                     text_ids=True)
    got, _ = _series(tmp_path / "sp", spark, lifetime=curve, budget=1.2, years=years,
                     text_ids=True)
    for a, b in zip(ref, got, strict=True):
        assert a["estab"].to_list() == b["estab"].to_list()
        np.testing.assert_allclose(b["rho_lifetime"].to_numpy(), a["rho_lifetime"].to_numpy(),
                                   rtol=1e-12, atol=0)
    with tabdp.Ledger.open(tmp_path / "sp") as led:
        st, b = led.state(), led.budget
    assert st["unit"].dtype == pl.String and led.unit_dtype == "String"
    assert 0 < st.height
    assert (st["rho@rows"] <= b.limit(st["size@rows"].to_numpy(), "rows")).all()
    assert (st["rho@payroll"] <= b.limit(st["size@payroll"].to_numpy(), "payroll")).all()


@pytest.mark.spark
def test_constant_lifetime_and_per_run_budgets_on_spark(spark: Any, tmp_path: Path) -> None:
    """Constant lifetime and per-run budgets: Spark's filter (a Spark column) is Polars'.

    The per-run budget (1.2) leaves the sum's units out of the count; the lifetime budget
    (3.0) leaves unit 9999 out of the third year's sum, as above.
    """
    years = range(2021, 2024)
    ref, ref_t = _series(tmp_path / "pl", None, budget=1.2, years=years)
    got, got_t = _series(tmp_path / "sp", spark, budget=1.2, years=years)
    for a, b in zip(ref_t, got_t, strict=True):
        for x, y in zip(a, b, strict=True):
            assert x.equals(y), (x, y)
    for a, b in zip(ref, got, strict=True):
        assert a["estab"].to_list() == b["estab"].to_list()
        for c in ("rho", "rho_pay", "rho_n", "rho_lifetime"):
            np.testing.assert_allclose(b[c].to_numpy(), a[c].to_numpy(), rtol=1e-12, atol=0)
    assert (got[-1].filter(pl.col("estab") == TARGET)["rho_pay"] == 0.0).all()


@pytest.mark.spark
def test_constant_filter_column_is_the_python_filter(spark: Any) -> None:
    """`_constant_admits_col` decides as `_admit_batch` (the Python workers' filter) does.

    Losses and totals at the limit, one ulp either side, NaN, infinities, zeros of both
    signs, two currencies; the per-run budget, the lifetime budget and both.
    """
    from tabdp.frame._spark import _admit_batch, _constant_admits_col
    from tabdp.privacy.budget import Budget

    lim = 1.0
    vals = [0.0, -0.0, 0.5, 0.25, np.nextafter(0.5, 1.0), np.nextafter(0.5, 0.0), lim,
            np.nextafter(lim, 2.0), np.inf, np.nan, 1e-300, 0.1, 0.2, 0.7]
    rng = np.random.default_rng(7)
    n = 600
    pdf = pl.DataFrame({"__tabdp_uid": np.arange(n),
                        **{f"{k}{i}": rng.choice(vals, n) for i in range(2)
                           for k in ("r", "e", "s")},
                        "__tabdp_led:rho": rng.choice(vals, n),
                        "__tabdp_life:rho": rng.choice(vals, n)})
    sdf = spark.createDataFrame(pdf.to_arrow())
    for budget, life in ((Budget(lim), None), (None, Budget(0.75)), (Budget(lim), Budget(0.9))):
        col = _constant_admits_col(budget, None if life is None else _Life(life), 2)
        got = pl.from_arrow(sdf.select("__tabdp_uid", col.alias("ok")).toArrow()).sort(
            "__tabdp_uid")
        want = _admit_batch(budget, ["a", "b"], "zcdp", pdf.to_pandas(), life)
        assert got["ok"].to_list() == want["a"].tolist() == want["b"].tolist()
        assert 0 < sum(want["a"]) < n


class _Life:
    """A stand-in for a `tabdp.Ledger` with a lifetime budget (only ``budget`` is read)."""

    def __init__(self, budget: Any) -> None:
        self.budget = budget


@pytest.mark.spark
def test_unit_ids_of_another_type_are_refused_before_data(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "l"
    with tabdp.Ledger.open(path, series="s", lifetime_budget=LIFETIME, create=True) as led:
        _run_year(year_sample(2021), led, 2021)
    sdf = spark.createDataFrame(year_sample(2022).with_columns(
        pl.col("estab").cast(pl.String)).to_arrow())
    with tabdp.Ledger.open(path) as led:
        s = tabdp.Session(unit="estab", seed=1, ledger=led)
        with pytest.raises(tabdp.TabdpError, match="keys units by Int64 ids"):
            sdf.dp.count(by="county", keys=KEYS, mechanism=COUNT, session=s)
        assert led.releases == 2 and not s.records


def _spec(folder: Path, year: int) -> Path:
    year_sample(year).write_parquet(folder / f"data_{year}.parquet")
    if not (folder / "ledger").exists():
        assert cli_main(["ledger", "init", str(folder / "ledger"), "--series", "t",
                         "--lifetime-budget", str(LIFETIME)], stdout=io.StringIO()) == 0
    path = folder / f"release_{year}.toml"
    path.write_text(series_spec(name=f"series_{year}", data=f"data_{year}.parquet",
                                ledger="ledger", series="t", lifetime=LIFETIME, seed=year,
                                public=f"out/{year}/public",
                                confidential=f"out/{year}/confidential"))
    return path


@pytest.mark.spark
def test_cli_run_engine_spark_advances_the_ledger(spark: Any, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``tabdp run --engine spark`` with ``[ledger]``: the Polars series, committed per run."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    from tabdp.release.runner import run_release
    from tabdp.release.spec import load_spec

    per = {}
    for engine in ("polars", "spark"):
        folder = tmp_path / engine
        folder.mkdir()
        per[engine] = []
        for year in range(2021, 2024):
            spec = _spec(folder, year)
            if engine == "spark" and year == 2021:  # the command line once
                err = io.StringIO()
                assert cli_main(["run", str(spec), "--test-seed", "--quiet", "--engine",
                                 "spark"], stderr=err) == 0, err.getvalue()
                conf = folder / "out" / str(year) / "confidential"
            else:
                res = run_release(load_spec(spec), test_seed=True, engine=engine,
                                  spark=spark if engine == "spark" else None)
                conf = res.confidential
            pr = pl.read_parquet(conf / "per_record_losses.parquet")
            assert json.loads((conf / "ledger.json").read_text())["release"] == year - 2020
            per[engine].append(pr)
            with tabdp.Ledger.open(folder / "ledger") as led:
                assert led.releases == year - 2020  # advanced once the outputs were written
        assert cli_main(["ledger", "verify", str(folder / "ledger"), "--series", "t"],
                        stdout=io.StringIO()) == 0
    for year, (a, b) in enumerate(zip(per["polars"], per["spark"], strict=True), start=2021):
        assert b.columns == a.columns and "rho_lifetime" in b.columns
        assert a["estab"].to_list() == b["estab"].to_list()
        np.testing.assert_allclose(b["rho_lifetime"].to_numpy(), a["rho_lifetime"].to_numpy(),
                                   rtol=1e-12, atol=0, err_msg=str(year))
        pa = (tmp_path / "polars" / "out" / str(year) / "public")
        pb = (tmp_path / "spark" / "out" / str(year) / "public")
        la, lb = (json.loads((p / "summary.json").read_text())["lifetime"] for p in (pa, pb))
        assert la == lb and len(la["releases"]) == year - 2020  # the bound over the series
        for f in ("pay.parquet", "n.parquet"):
            assert pl.read_parquet(pa / f).equals(pl.read_parquet(pb / f)), (year, f)
    # at its lifetime budget: left out of the 2023 sum on Spark
    last = per["spark"][2].filter(pl.col("estab") == TARGET)
    assert last["rho_pay"].item() == 0.0 and last["rho_lifetime"].item() == pytest.approx(2.625)


@pytest.mark.spark
def test_cli_spark_run_refused_while_another_run_holds_the_ledger(spark: Any,
                                                                  tmp_path: Path) -> None:
    spec = _spec(tmp_path, 2021)
    with tabdp.Ledger.open(tmp_path / "ledger"):
        err = io.StringIO()
        assert cli_main(["run", str(spec), "--test-seed", "--quiet", "--engine", "spark"],
                        stderr=err) == 2
    assert "in use by another run" in err.getvalue()
    assert not (tmp_path / "out" / "2021").exists()
    with tabdp.Ledger.open(tmp_path / "ledger") as led:
        assert led.releases == 0


@pytest.mark.spark
def test_medians_under_a_lifetime_budget_on_spark(spark: Any, tmp_path: Path) -> None:
    """Quantile releases filter and charge the lifetime ledger on Spark as on Polars."""
    pr: dict[str, list[pl.DataFrame]] = {"pl": [], "sp": []}
    tables: dict[str, list[pl.DataFrame]] = {"pl": [], "sp": []}
    for name in ("pl", "sp"):
        for year in (2021, 2022):
            df = year_sample(year)
            frame = df if name == "pl" else spark.createDataFrame(df.to_arrow())
            with tabdp.Ledger.open(tmp_path / name, series="s", lifetime_budget=1.0,
                                   create=True) as led:
                s = tabdp.Session(unit="estab", seed=year, ledger=led)
                out = [_polars(frame.dp.median("payroll", by="county", keys=KEYS,
                                               bounds=(0.0, 500.0), epsilon=1.0, session=s,
                                               name=f"m{i}")) for i in range(3)]
                pr[name].append(_polars(s.report().per_record).sort("estab"))
                tables[name] += out
    for x, y in zip(tables["pl"], tables["sp"], strict=True):  # the same tables (same noise)
        assert x.equals(y), (x, y)
    for a, b in zip(pr["pl"], pr["sp"], strict=True):
        assert a["estab"].to_list() == b["estab"].to_list()
        np.testing.assert_allclose(b["rho_lifetime"].to_numpy(), a["rho_lifetime"].to_numpy(),
                                   rtol=1e-12, atol=0)
    # epsilon = 1 a median: rho 0.5 each; the third of a year is left out, then all of 2022
    assert pr["sp"][0]["rho_lifetime"].max() <= 1.0
    assert pr["sp"][1].filter(pl.col("estab") == TARGET).height == 0


@pytest.mark.spark
def test_a_failed_spark_run_leaves_the_ledger_unchanged(spark: Any, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The run charges the ledger in memory; a failure before its outputs are written drops it."""
    from tabdp.release.runner import run_release
    from tabdp.release.spec import load_spec

    def boom(*a: Any, **k: Any) -> None:
        raise RuntimeError("disk full")

    import tabdp.report.html as html

    monkeypatch.setattr(html, "render_confidential_html", boom)
    with pytest.raises(tabdp.TabdpError):
        run_release(load_spec(_spec(tmp_path, 2021)), test_seed=True, engine="spark",
                    spark=spark)
    with tabdp.Ledger.open(tmp_path / "ledger") as led:
        assert led.releases == 0 and led.state().height == 0
    assert not (tmp_path / "out" / "2021" / "public").exists()
