"""One seed, one answer on every engine (issue 14, "Same answer everywhere").

The same data and the same seeded session give identical releases on the four input forms of the
accessor (pandas, Polars eager, Polars lazy, Polars streaming from Parquet; tests/_engines.py):
every column of every output (true aggregates, noise, uncertainty), the confidential per-record
report and the public report, exactly. The workload has firms of several rows, missing values
handled by a rule, rows outside the key set, keys absent from the data, and a budget that leaves
some units out; it runs in row mode and with firms as the privacy unit.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import tabdp
from tabdp import mechanisms as mech

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from _engines import ENGINES, as_engine, as_polars  # noqa: E402

# c6 and naics 51 have no data; c9 is outside the key set
KEYS = tabdp.KeySet.from_dict(county=["c1", "c2", "c3", "c4", "c5", "c6"],
                              naics=["11", "21", "31", "51"])
BY = ["county", "naics"]
N_FIRMS = 700
BUDGET = 6.0


def _data(seed: int = 20261126) -> pl.DataFrame:
    """About 2,500 establishments of 700 firms (1 to 7 each), some payrolls missing."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 8, N_FIRMS)
    firm = np.repeat(np.arange(N_FIRMS), sizes)
    n = firm.size
    home = rng.choice(["c1", "c2", "c3", "c4", "c5", "c9"], N_FIRMS,
                      p=[0.25, 0.2, 0.2, 0.15, 0.15, 0.05])
    # most establishments sit in their firm's county; some elsewhere
    county = np.where(rng.random(n) < 0.8, home[firm],
                      rng.choice(["c1", "c2", "c3", "c4", "c5", "c9"], n))
    payroll = rng.lognormal(10.0, 1.5, n)
    payroll[rng.random(n) < 0.03] = np.nan
    return pl.DataFrame({
        "firm": firm,
        "county": county.tolist(),
        "naics": rng.choice(["11", "21", "31"], n).tolist(),
        "payroll": pl.Series(payroll).fill_nan(None),
        "emp": rng.integers(1, 400, n),
    })


def _workload(frame: Any, unit: str | None) -> tuple[list[pl.DataFrame], tabdp.Session]:
    """Sums (two measures, Gaussian; log transform), a count and a median in one session."""
    # Gaussian(σ = 1e5): ρ(Δ) = Δ²/(2σ²), 0.18 at a payroll of 6e4 and 50 at 1e6; the log
    # transform costs 1.8 at 6e4; the median ε = 1 per row in a cell (ρ = k²/2 for k rows).
    # The budget leaves the largest units out, the others are released.
    s = tabdp.Session(unit=unit, seed=1234, budget=BUDGET)
    outs = [
        frame.dp.sum(["payroll", "emp"], by=BY, keys=KEYS, mechanism=mech.Gaussian(1e5),
                     session=s, nulls="zero", name="pay_emp"),
        frame.dp.sum("payroll", by=BY, keys=KEYS, session=s, nulls="drop", name="log_pay",
                     mechanism=mech.LogTransform(sigma=0.25, offset=1e5)),
        frame.dp.count(by=BY, keys=KEYS, mechanism=mech.Gaussian(3.0), session=s, name="n"),
        frame.dp.median("payroll", by=BY, keys=KEYS, bounds=(0.0, 1e6), epsilon=1.0,
                        session=s, nulls="drop", name="med"),
    ]
    return [as_polars(o) for o in outs], s


def _run(engine: str, unit: str | None, tmp_path: pathlib.Path,
         row_group_size: int | None = None) -> dict[str, Any]:
    outs, s = _workload(as_engine(_data(), engine, tmp_path, row_group_size), unit)
    report = s.report()
    return {"outputs": outs, "per_record": as_polars(report.per_record),
            "public": report.to_dict(), "confidential": report.confidential_summary()}


@pytest.fixture(scope="module", params=[None, "firm"], ids=["row", "unit"])
def reference(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[str | None, dict[str, Any]]:
    """The pandas run (the engine every other one is compared with)."""
    unit = request.param
    return unit, _run("pandas", unit, tmp_path_factory.mktemp("pandas"))


def test_reference_run_exercises_the_workload(reference: tuple[str | None, dict[str, Any]]
                                              ) -> None:
    """The workload exercises what the equality test needs.

    Keys without data, rows outside the keys, units left out by the budget, noisy estimates.
    """
    unit, ref = reference
    pay, logpay, count, med = ref["outputs"]
    assert pay.height == logpay.height == count.height == med.height == len(KEYS)
    assert pay.select(BY).rows() == KEYS.to_polars().rows()
    truth = _data().group_by(BY).agg(pl.len().alias("true_n"))
    joined = count.join(truth, on=BY, how="left").with_columns(pl.col("true_n").fill_null(0))
    assert (joined["true_n"] == 0).sum() >= 6           # c6 and naics 51: keys without data
    assert not joined["count"].equals(joined["true_n"].cast(pl.Float64))  # noisy
    conf = ref["confidential"]["queries"][0]
    assert conf["rows_outside_keys"] > 0
    pr = ref["per_record"]
    # every unit with a row in a released cell (none of c9's firms of one row)
    inside = _data().filter(pl.col("county") != "c9")
    assert pr.height == (inside["firm"].n_unique() if unit else _data().height)
    # the budget binds: some units are left out of a release, most are released
    assert (pr["rho"] <= BUDGET * (1 + 1e-12)).all()
    released = [(pr[f"rho_{q}"] > 0).sum() for q in ("pay_emp", "log_pay", "n", "med")]
    for q in released:
        assert pr.height / 2 < q < pr.height - 10, released


@pytest.mark.parametrize("engine, row_group_size",
                         [*(pytest.param(e, None, marks=pytest.mark.spark) if e == "spark"
                            else (e, None) for e in ENGINES if e != "pandas"),
                          ("streaming", 97)],
                         ids=[*(e for e in ENGINES if e != "pandas"), "streaming-row-groups"])
def test_every_engine_gives_the_same_release(engine: str, row_group_size: int | None,
                                             tmp_path: pathlib.Path,
                                             reference: tuple[str | None, dict[str, Any]],
                                             request: pytest.FixtureRequest) -> None:
    """Identical outputs (every column, exactly), public report and confidential summary.

    The per-record report is identical too, bit for bit (unit mode: sorted by unit). The
    streaming input is also read from a file of many row groups (97 rows each).
    On Spark (data read from the driver's Arrow table, two partitions) the same holds.
    """
    if engine == "spark":
        request.getfixturevalue("spark")  # starts Spark, or skips without PySpark / Java
    unit, ref = reference
    got = _run(engine, unit, tmp_path, row_group_size)
    for a, b in zip(got["outputs"], ref["outputs"], strict=True):
        assert_frame_equal(a, b, check_exact=True)
    assert got["public"] == ref["public"]
    if unit is None:
        assert got["confidential"] == ref["confidential"]
        assert_frame_equal(got["per_record"], ref["per_record"], check_exact=True)
    else:  # the same units with the same losses, bit for bit (each unit's losses are summed
        # in key-set order on every engine: docs/privacy-semantics.md, review r56)
        assert got["confidential"] == ref["confidential"]
        mine, theirs = got["per_record"].sort(unit), ref["per_record"].sort(unit)
        assert_frame_equal(mine, theirs, check_exact=True)


def test_unit_mode_per_record_report_is_bit_identical(tmp_path: pathlib.Path) -> None:
    """Same seed, same data: the same per-record report, bit for bit and row for row.

    On every engine and on repeated runs of one engine.
    """
    runs = [_run(e, "firm", tmp_path)
            for e in ("pandas", "polars", "polars", "polars", "lazy", "streaming")]
    for other in runs[1:]:
        assert other["confidential"] == runs[0]["confidential"]
        assert_frame_equal(other["per_record"], runs[0]["per_record"], check_exact=True)
