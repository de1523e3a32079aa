"""In-memory releases: few units left out by the individual filter (stop 64).

When the filter leaves few rows out, the Polars backend takes each cell's total as the total of
the rows as read minus the left-out rows' (`tabdp.frame.backends.polars._minus`), not from a
second group-by of the rows with the left-out ones zeroed. The sums are exact integers (fixed
point in Int128, rows in Int64), so both paths must give the same totals, tables, per-record
report and confidential counters bit for bit. Each case runs both paths (forced through
``FEW_LEFT_OUT``) and checks that the fast one ran and that units were left out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech
from tabdp.frame.backends import polars as backend
from tabdp.mechanisms.logconcave import VectorSubbotin

NAMES = ["a", "b", "c", "solo", "empty"]  # cell i is NAMES[i]
KEYS = tabdp.KeySet.from_dict(c=NAMES)
BIG = 1.8e19  # just below the clamp (2**64): its fixed point is near 2**88


def _frame() -> pl.DataFrame:
    """Small units, a unit with many rows, huge positive and negative units, a lone unit.

    Units 0..399 have a few small rows (some negative); unit 1000 has 300 rows; units 2000 and
    2001 hold values near the clamp (+ and -) in "a" and "b"; unit 3000 is the only unit of
    cell "solo" (a huge value, so the filter leaves it out); "z" is outside the key set.
    """
    rng = np.random.default_rng(64)
    n = 1_500
    u = rng.integers(0, 400, n).tolist()
    c = rng.choice(["a", "b", "c", "z"], n).tolist()
    x = rng.integers(-5, 6, n).astype(float).tolist()
    y = rng.integers(-3, 4, n).tolist()
    u += [1000] * 300
    c += ["a", "b", "c"] * 100
    x += [0.75] * 300
    y += [2] * 300
    u += [2000, 2000, 2001, 2001, 3000]
    c += ["a", "b", "a", "b", "solo"]
    x += [BIG, BIG / 3, -BIG, -BIG / 7, BIG / 2]
    y += [2**62, 2**61, -(2**62), -(2**60), 2**62]
    return pl.DataFrame({"u": u, "c": c, "x": x, "y": y})


def _run(df: Any, unit: str | None, kind: str) -> tuple[list[Any], pl.DataFrame, list[Any],
                                                          list[pl.DataFrame]]:
    """Three releases of one session: each table, the report, the records and totals."""
    full: list[pl.DataFrame] = []
    states: list[Any] = []
    s = tabdp.Session(unit=unit, seed=5, budget=200.0)
    orig = backend.MemoryBackend._aggregate

    def spy(self: Any, rel: Any) -> Any:
        agg = orig(self, rel)
        full.append(agg.full)
        states.append(agg.state)
        return agg

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(backend.MemoryBackend, "_aggregate", spy)
        sum_mech = (VectorSubbotin(r=2.0, scale=2.0) if kind == "joint"
                    else mech.Gaussian(2.0))
        tables = [
            df.dp.sum(["x", "y"], by="c", keys=KEYS, mechanism=sum_mech, negatives="allow",
                      session=s),
            df.dp.count(by="c", keys=KEYS, session=s),
            df.dp.sum("y", by="c", keys=KEYS, mechanism=mech.Gaussian(3.0),
                      negatives="allow", session=s),
        ]
    return tables, s.report().per_record, s.records, (full, states)


def _both(monkeypatch: pytest.MonkeyPatch, df: Any, unit: str | None, kind: str
          ) -> tuple[Any, Any, int]:
    calls = [0]
    orig = backend._minus

    def counted(*a: Any) -> pl.DataFrame:
        calls[0] += 1
        return orig(*a)

    monkeypatch.setattr(backend, "_minus", counted)
    monkeypatch.setattr(backend, "FEW_LEFT_OUT", 10**18)  # never: the general path
    general = _run(df, unit, kind)
    assert calls[0] == 0
    monkeypatch.setattr(backend, "FEW_LEFT_OUT", 1)  # whenever at most all rows: fast path
    fast = _run(df, unit, kind)
    return general, fast, calls[0]


@pytest.mark.parametrize(("unit", "kind"), [("u", "apart"), ("u", "joint"), (None, "apart")])
def test_subtracted_totals_equal_the_group_by(monkeypatch: pytest.MonkeyPatch,
                                              unit: str | None, kind: str) -> None:
    df = _frame()
    general, fast, calls = _both(monkeypatch, df, unit, kind)
    (tg, rg, recg, fg), (tf, rf, recf, ff) = general, fast
    for a, b in zip(fg[0], ff[0], strict=True):  # the exact totals, every cell
        assert a.schema == b.schema and a.equals(b)
    for a, b in zip(tg, tf, strict=True):  # the published tables
        assert a.equals(b)
    assert rg.equals(rf)  # per-record report
    for a, b in zip(recg, recf, strict=True):
        assert a.confidential == b.confidential
        assert np.array_equal(np.asarray(a.losses.units), np.asarray(b.losses.units))
    left = [r.confidential["units_left_out_by_budget"] for r in recg]
    assert all(n < 20 for n in left), left  # a few units left out
    # every release that left units out took the fast path (row mode's count leaves none out)
    assert calls == sum(n > 0 for n in left) == (3 if unit else 2), (calls, left)


def test_lone_left_out_unit_empties_its_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit 3000, alone in "solo", is left out of the sum: the cell's total is exactly 0."""
    _, (_, _, _, (full, _)), _ = _both(monkeypatch, _frame(), "u", "apart")
    solo = NAMES.index("solo")
    row = full[0].filter(pl.col("__tabdp_cell") == solo).row(0, named=True)
    assert row["x"] == 0 and row["y"] == 0 and row["__tabdp_rows"] == 1


def test_huge_left_out_values_subtracted_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The admitted totals equal exact Python sums of the admitted rows (fixed point)."""
    df = _frame()
    _, (_, _, _, (full, states)), _ = _both(monkeypatch, df, "u", "apart")
    charges, admitted = states[0]  # the first sum's units and its filter's decisions on x
    kept = charges.units.filter(pl.Series(admitted["x"])).to_list()
    assert 0 < len(kept) < charges.n
    for i, name in enumerate(NAMES):
        rows = df.filter((pl.col("c") == name) & pl.col("u").is_in(kept))
        want = sum(round(v * 2**24) for v in rows["x"].to_list())
        got = full[0].filter(pl.col("__tabdp_cell") == i)
        assert (got["x"].item() or 0) == want, name
