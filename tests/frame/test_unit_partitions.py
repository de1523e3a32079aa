"""Unit mode read in partitions of the units (``Session(unit_partitions=K)``, issue 29 item 5).

Every unit's rows fall in one partition (``hash(unit) mod K``), so each unit's charges, the
individual filter's decision and its contributions are those of one pass; cell totals are exact
sums over the partitions. Seeded runs with K = 1 and K > 1 must agree on everything: the
published tables (fixed noise), per-record losses, admitted units, confidential counters and
the per-cell audit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech
from tabdp.exceptions import InvalidParameterError
from tabdp.frame._engine import unit_partition
from tabdp.frame.backends.polars import unit_partitions

KEYS = tabdp.KeySet.from_dict(c=["a", "b", "c"])


def _frame(ids: str) -> pl.DataFrame:
    rng = np.random.default_rng(7)
    n = 2_000
    u = rng.integers(0, 400, n)
    return pl.DataFrame({
        "u": [f"id{v}" for v in u] if ids == "text" else u,
        "c": rng.choice(["a", "b", "c", "z"], n),  # "z" is outside the key set
        "x": rng.integers(0, 40, n).astype(float),
        "y": rng.integers(-20, 20, n),
    })


def _run(df: Any, k: int | None, budget: float | None, max_cells: int | None = None
         ) -> tuple[list[pl.DataFrame], pl.DataFrame, list[Any]]:
    s = tabdp.Session(unit="u", seed=11, budget=budget, unit_partitions=k, track_cells=True)
    tables = [
        df.dp.sum("x", by="c", keys=KEYS, mechanism=mech.ExpPolyLog(sigma=1.0, a=1.0, d=4.0),
                  session=s, max_cells=max_cells),
        df.dp.count(by="c", keys=KEYS, session=s),
        df.dp.sum("y", by="c", keys=KEYS, mechanism=mech.Gaussian(3.0), negatives="allow",
                  session=s),
    ]
    return tables, s.report().per_record, s.records


@pytest.mark.parametrize("ids", ["int", "text"])
@pytest.mark.parametrize("budget", [None, 2.0])
def test_partitions_change_nothing(ids: str, budget: float | None) -> None:
    df = _frame(ids)
    t1, r1, rec1 = _run(df, 1, budget, max_cells=2)
    for k in (3, 7):
        tk, rk, reck = _run(df.lazy(), k, budget, max_cells=2)
        for a, b in zip(t1, tk, strict=True):
            assert a.equals(b)
        assert r1.equals(rk)  # per-record losses, every unit, same order
        for a, b in zip(rec1, reck, strict=True):
            assert a.confidential == b.confidential
            assert a.losses.units.equals(b.losses.units)  # the admitted units
            for f in ("rho", "epsilon", "size"):
                assert np.array_equal(getattr(a.losses, f), getattr(b.losses, f))
            assert (a.cells is None) == (b.cells is None)
            assert a.cells is None or a.cells.equals(b.cells)


def test_budget_leaves_some_out() -> None:
    """The comparison above covers the individual filter: some units are left out, not all."""
    _, _, rec = _run(_frame("int"), 3, 2.0, max_cells=2)
    left = [r.confidential["units_left_out_by_budget"] for r in rec]
    assert any(0 < n < 400 for n in left), left


def test_partition_holds_units_whole() -> None:
    df = pl.DataFrame({"u": [1, 2, 3, 1, 2, 3, 4] * 3})
    parts = [df.filter(unit_partition("u", p, 4)) for p in range(4)]
    assert sum(p.height for p in parts) == df.height
    seen = [set(p["u"].to_list()) for p in parts]
    assert all(not (a & b) for i, a in enumerate(seen) for b in seen[i + 1:])


def test_setting_checked_and_used() -> None:
    assert unit_partitions(None, tabdp.Session(unit="u", unit_partitions=5)) == 5
    for bad in (0, -1, 2.0, True, "4"):
        with pytest.raises(InvalidParameterError, match="unit_partitions"):
            tabdp.Session(unit="u", unit_partitions=bad)  # type: ignore[arg-type]


def test_automatic_count_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """``unit_partitions=None`` on an input judged too large for one pass: the same results."""
    from tabdp.frame.backends import polars as backend

    df = _frame("int")
    t1, r1, _ = _run(df, 1, 2.0)
    s = tabdp.Session(unit="u")
    monkeypatch.setattr(backend, "BYTES_PER_ROW", 10**12)
    assert unit_partitions(SimpleOp(df.lazy()), s) == 64
    ta, ra, _ = _run(df.lazy(), None, 2.0)
    assert all(a.equals(b) for a, b in zip(t1, ta, strict=True)) and r1.equals(ra)


class SimpleOp:
    """What `unit_partitions` reads of an opened release."""

    def __init__(self, lf: pl.LazyFrame) -> None:
        self.native = lf
        self.lf = lf


def test_phases_do_not_show_the_partitions() -> None:
    """The phases reported are the same whatever the number of partitions.

    (The automatic number follows the input's size.)
    """
    seen: dict[int, list[tuple[str, str]]] = {}
    for k in (1, 5):
        got: list[tuple[str, str]] = []
        s = tabdp.Session(unit="u", seed=1, unit_partitions=k,
                          progress=lambda n, w, got=got: got.append((n, w)))
        _frame("int").dp.count(by="c", keys=KEYS, session=s)
        seen[k] = got
    assert seen[1] == seen[5]


def test_a_source_changing_between_passes_is_read_whole_per_unit() -> None:
    """Each of the K passes evaluates the input again; each unit is read in one pass only.

    An input whose rows differ between evaluations (half the rows drawn by an unseeded shuffle,
    one missing value) read in 3 passes: the release is the one of the rows its passes read.
    A unit's contribution, its loss and the counters come from the same rows (every value is
    1, so the units' contributions add up to the rows counted in the released cells), the
    missing value is refused whenever a pass read it, and never released as 0. Each unit's
    rows are in one cell, so its largest contribution to a cell is its rows read there.
    """
    n = 600
    u = np.random.default_rng(5).integers(0, 150, n)
    df = pl.DataFrame({"u": u, "c": np.array(["a", "b", "z"])[u % 3],
                       "x": [None, *([1.0] * (n - 1))]})
    seen = set()
    for t in range(40):
        lf = df.lazy().filter(pl.int_range(pl.len()).shuffle() < n // 2)
        s = tabdp.Session(unit="u", seed=t, unit_partitions=3, track_cells=True)
        try:
            lf.dp.sum("x", by="c", keys=KEYS, mechanism=mech.Gaussian(1.0), session=s,
                      nulls="error")
        except tabdp.exceptions.DataValidationError:
            seen.add("refused")
            continue
        seen.add("released")
        rec = s.records[0]
        q = s.report().confidential_summary()["queries"][0]
        rows_in = q["rows_in_released_cells"]
        assert q["rows_read"] == q["rows_outside_keys"] + rows_in
        assert float(np.sum(rec.losses.size)) == rows_in == q["left_out_by_budget"]["x"]["total"]
        assert rec.cells is not None and rec.cells["units"].sum() == len(rec.losses.units)
        assert rec.losses.units.n_unique() == len(rec.losses.units)
    assert seen == {"refused", "released"}
