"""The in-memory row-mode snapshot holds 64-bit measures where they fit (stop 68, issue 29).

Its measures' fixed-point values are Int64 columns when every value fits in 64 bits (half the
memory of Int128), and a column with a value beyond them is Int128; every total is summed as
Int128 either way. Nothing shown may depend on the width: the outputs, the per-record report
and the confidential summaries are those of the streaming engine (always Int128), seeded.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import tabdp
from tabdp import mechanisms as mech
from tabdp.frame import binding

KEYS = tabdp.KeySet.from_dict(c=["a", "b", "z"])


def _release(frame: pl.DataFrame, streaming: bool, budget: float | None = None
             ) -> tuple[list[pl.DataFrame], pl.DataFrame, tabdp.Session]:
    s = tabdp.Session(seed=11, streaming=streaming,
                      **({} if budget is None else {"budget": budget}))
    outs = [frame.dp.sum(["x", "n"], by="c", keys=KEYS, mechanism=mech.Gaussian(1e3), session=s,
                         negatives="allow"),
            frame.dp.count(by="c", keys=KEYS, session=s)]
    return outs, s.report().per_record, s


def _snapshot_schema(s: tabdp.Session) -> dict[str, Any]:
    (entry,) = binding.of(s).snapshot.values()
    return dict(entry["snapshot"].data.schema)


def _same_as_streaming(frame: pl.DataFrame, budget: float | None = None) -> tabdp.Session:
    mem, mem_rep, s = _release(frame, streaming=False, budget=budget)
    stream, stream_rep, s2 = _release(frame, streaming=True, budget=budget)
    for a, b in zip(mem, stream, strict=True):
        assert_frame_equal(a, b)
    assert_frame_equal(mem_rep, stream_rep)
    assert [r.confidential for r in s.records] == [r.confidential for r in s2.records]
    return s


def test_in_memory_row_snapshot_holds_64_bit_measures_where_they_fit() -> None:
    frame = pl.DataFrame({"c": ["a", "b", "a", "q"], "x": [1.5, 2.25, -0.0, 7.0],
                          "n": pl.Series([3, 4, 5, 6], dtype=pl.Int32)})
    s = _same_as_streaming(frame)
    schema = _snapshot_schema(s)
    assert schema["x"] == pl.Int64 and schema["n"] == pl.Int64


@pytest.mark.parametrize("budget", [None, 1e9])
def test_a_value_beyond_64_bits_widens_its_column_only(budget: float | None) -> None:
    # 2**40 in fixed point (2**-24 steps) is 2**64: beyond Int64; a UInt64 above 2**63 too
    frame = pl.DataFrame({"c": ["a", "b", "a", "b", "z"],
                          "x": [1.5, 2.0**40, 3.0, -(2.0**39), 0.25],
                          "n": pl.Series([1, 2, 3, 4, 5], dtype=pl.UInt64)})
    s = _same_as_streaming(frame, budget)
    schema = _snapshot_schema(s)
    assert schema["x"] == pl.Int128 and schema["n"] == pl.Int64
    big_n = frame.with_columns(pl.Series("n", [1, 2**64 - 1, 3, 2**63, 5], dtype=pl.UInt64))
    s = _same_as_streaming(big_n, budget)
    assert _snapshot_schema(s)["n"] == pl.Int128


def test_sums_of_64_bit_values_beyond_int64_are_exact() -> None:
    # every value fits in Int64 but a cell's total does not: summed as Int128, not wrapped
    frame = pl.DataFrame({"c": ["a"] * 5 + ["b"],
                          "x": [2.0**38] * 5 + [-(2.0**38)],
                          "n": pl.Series([2**62] * 4 + [-(2**63), 7], dtype=pl.Int64)})
    s = _same_as_streaming(frame)
    schema = _snapshot_schema(s)
    assert schema["x"] == pl.Int64 and schema["n"] == pl.Int64
