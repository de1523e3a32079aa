"""In-memory releases: few units left out by the individual filter (stop 64).

When the filter leaves few rows out, the Polars backend takes each cell's total as the total of
the rows as read minus the left-out rows' (`tabdp.frame.backends.polars._minus`), not from a
second group-by of the rows with the left-out ones zeroed. The sums are exact integers (fixed
point in Int128, rows in Int64), so both paths must give the same totals, tables, per-record
report and confidential counters bit for bit. Each case runs both paths (forced through
``FEW_LEFT_OUT``) and checks that the fast one ran and that units were left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech
from tabdp.frame.backends import polars as backend
from tabdp.mechanisms.logconcave import VectorSubbotin

T = TypeVar("T")

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


def _general_then_fast(monkeypatch: pytest.MonkeyPatch, run: Callable[[], T]
                       ) -> tuple[T, T, int]:
    """``run()`` on the general path, then on the subtraction path; and the fast path's calls."""
    calls = [0]
    orig = backend._minus

    def counted(*a: Any) -> pl.DataFrame:
        calls[0] += 1
        return orig(*a)

    monkeypatch.setattr(backend, "_minus", counted)
    monkeypatch.setattr(backend, "FEW_LEFT_OUT", 10**18)  # never: the general path
    general = run()
    assert calls[0] == 0
    monkeypatch.setattr(backend, "FEW_LEFT_OUT", 1)  # whenever at most all rows: fast path
    fast = run()
    return general, fast, calls[0]


def _both(monkeypatch: pytest.MonkeyPatch, df: Any, unit: str | None, kind: str
          ) -> tuple[Any, Any, int]:
    return _general_then_fast(monkeypatch, lambda: _run(df, unit, kind))


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


def _typed_frame(seed: int, variant: str) -> pl.DataFrame:
    """Random small units, a few rows with edge values, measures in ``variant``'s dtypes.

    Most rows are small (their units are admitted under a budget of 5); about one in ten
    holds a huge value (its unit is left out), -0.0, a value beyond the clamp, or an
    integer at the ends of Int64.
    """
    rng = np.random.default_rng(seed)
    n = 400
    sp = rng.random(n)
    x = rng.normal(0, 1, n)
    x = np.where(sp < 0.03, -0.0, x)
    x = np.where((sp > 0.03) & (sp < 0.06), BIG * rng.choice([-1.0, 1.0], n) / 3, x)
    x = np.where((sp > 0.06) & (sp < 0.07), 3e19, x)  # beyond the clamp
    x = np.where((sp > 0.07) & (sp < 0.09), rng.normal(0, 1e12, n), x)
    y = rng.integers(-3, 4, n)
    y = np.where((sp > 0.09) & (sp < 0.11), rng.integers(-(2**62), 2**62, n), y)
    y = np.where(sp > 0.985, rng.choice([2**63 - 1, -(2**63)], n), y)
    df = pl.DataFrame({"u": rng.integers(0, 150, n), "c": rng.choice([*NAMES[:3], "z"], n),
                       "x": x, "y": y})
    if variant == "nulls":
        df = df.with_columns(pl.when(pl.Series(sp > 0.95)).then(None).otherwise(pl.col(c))
                             .alias(c) for c in ("x", "y"))
    elif variant == "decimal":
        df = df.with_columns(pl.col("x").clip(-1e12, 1e12).round(3).cast(pl.Decimal(20, 3)))
    elif variant == "wide":
        df = df.with_columns(pl.col("x").cast(pl.Float32),
                             (pl.col("y").cast(pl.Int128) * 2**40).alias("y"))
    elif variant == "unsigned":
        df = df.with_columns(pl.col("y").cast(pl.Int128).abs().cast(pl.UInt64))
    return df


@pytest.mark.parametrize("budget", [1e-9, 5.0])
@pytest.mark.parametrize("variant", ["nulls", "decimal", "wide", "unsigned"])
def test_subtraction_is_exact_for_every_measure_dtype(monkeypatch: pytest.MonkeyPatch,
                                                      variant: str, budget: float) -> None:
    """Both paths, bit for bit, on nulls, decimals, Float32, Int128, UInt64 and edge values.

    A budget of 1e-9 leaves every unit out (each cell's total is then exactly 0); 5 the
    units of the huge values.
    Review rev65w (held: randomized comparisons of both paths found no difference).
    """
    df = _typed_frame(65, variant)
    nulls = "zero" if variant == "nulls" else "error"

    def run() -> tuple[list[pl.DataFrame], list[Any], pl.DataFrame]:
        full: list[pl.DataFrame] = []
        orig = backend.MemoryBackend._aggregate

        def spy(self: Any, rel: Any) -> Any:
            agg = orig(self, rel)
            full.append(agg.full)
            return agg

        s = tabdp.Session(unit="u", seed=5, budget=budget, track_cells=True)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(backend.MemoryBackend, "_aggregate", spy)
            tables = [df.dp.sum(["x", "y"], by="c", keys=KEYS, mechanism=mech.Gaussian(2.0),
                                negatives="allow", nulls=nulls, session=s),
                      df.dp.count(by="c", keys=KEYS, session=s)]
        return full, [*tables, *[r.confidential for r in s.records]], s.report().per_record

    (gf, go, gr), (ff, fo, fr), calls = _general_then_fast(monkeypatch, run)
    left = [c["units_left_out_by_budget"] for c in fo[2:]]
    assert left[0] > 0 and calls == sum(n > 0 for n in left), (left, calls)
    if budget > 1e-6:  # some units kept, some left out
        assert left[0] < 150 - 20, left
    for a, b in zip(gf, ff, strict=True):
        assert a.schema == b.schema and a.equals(b)
    for a, b in zip(go, fo, strict=True):
        assert a.equals(b) if isinstance(a, pl.DataFrame) else a == b
    assert gr.equals(fr)
    if budget < 1e-6:  # every unit left out: every total is 0
        assert all(v in (0, None) for row in ff[0].drop("__tabdp_cell").rows()
                   for v in row[:-1])  # the measures (the rows are kept: 0 or more)
