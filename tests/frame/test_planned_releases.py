"""Releases planned together (``planned_releases`` / ``execute_planned``).

The claim (docs/privacy-semantics.md, "Releases planned together"): every release of a batch is
checked before any data is read or anything is recorded, and the batch gives what the same
releases give one by one through the accessor. Every test below failed on the code first
reviewed except the streaming key-set cases (kept as guards: there the refusal already came
first). The batch's equality with single releases is tests/frame/test_batched.py.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech
from tabdp.exceptions import ColumnTypeError, InvalidParameterError
from tabdp.frame._release import execute_planned, planned_releases

K = tabdp.KeySet.from_dict(c=["a", "b"])


def _frame(streaming: bool) -> Any:
    df = pl.DataFrame({"c": ["a", "b", "b"], "s": [1, 2, 3], "f": [1.0, 2.0, 3.0],
                       "x": [1.0, 2.0, 3.0], "y": [1, 2, 3], "measure": ["a", "a", "b"]})
    return df.lazy() if streaming else df


GOOD = dict(kind="count", by="c", keys=K, name="good")


# -- 1. a plan is executed once, in the session it was planned for ------------------------------
@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "in-memory"])
def test_a_plan_executed_twice_is_refused(streaming: bool) -> None:
    """A plan executed again is refused, nothing recorded.

    It recorded a second release with the same name: the streaming per-record report then
    failed (duplicate ``rho_x``), the in-memory one showed a single ``rho_x`` column that no
    longer added up to ``rho``.
    """
    s = tabdp.Session(seed=1, streaming=streaming, budget=5.0)
    rels = planned_releases(_frame(streaming), s, [dict(
        kind="sum", measures="x", by="c", keys=K, name="x", mechanism=mech.Gaussian(1.0))])
    execute_planned(rels)
    with pytest.raises(InvalidParameterError, match=r"\['x'\] are already used"):
        execute_planned(rels)
    assert [r.name for r in s.records] == ["x"]
    per = s.report().per_record
    assert (per["rho"] == per["rho_x"]).all()


# origin: review R6
@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "in-memory"])
def test_a_release_between_planning_and_executing_cannot_share_a_default_name(
        streaming: bool) -> None:
    """The plan's default name ``q1_count`` was taken by a release made in between."""
    s = tabdp.Session(seed=1, streaming=streaming)
    fr = _frame(streaming)
    rels = planned_releases(fr, s, [dict(kind="count", by="c", keys=K)])
    fr.dp.count(by="c", keys=K, session=s)  # q1_count
    with pytest.raises(InvalidParameterError, match=r"\['q1_count'\] are already used"):
        execute_planned(rels)
    assert [r.name for r in s.records] == ["q1_count"]
    assert s.report().per_record.columns.count("rho_q1_count") == 1


# origin: review R6
@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "in-memory"])
def test_concatenated_plans_with_one_name_are_refused_before_any_release(
        streaming: bool) -> None:
    """Two plans of one session and input each named their count ``q1_count``."""
    s = tabdp.Session(seed=1, streaming=streaming)
    fr = _frame(streaming)
    one = planned_releases(fr, s, [dict(kind="count", by="c", keys=K)])
    two = planned_releases(fr, s, [dict(kind="count", by="c", keys=K)])
    with pytest.raises(InvalidParameterError, match=r"twice in these planned releases"):
        execute_planned([*one, *two])
    assert not s.records


# -- 2. key-set refusals are checks of the plan ----------------------------------------------
BAD_KEYS = {
    "text-vs-number": (dict(kind="count", by="c", keys=tabdp.KeySet.from_dict(c=[1, 2]),
                            name="bad"), "does not convert between numbers and text"),
    "keys-merge": (dict(kind="count", by="f", keys=tabdp.KeySet.from_dict(f=[2**53, 2**53 + 1]),
                        name="bad"), "become equal when converted"),
}


# origin: review R6
@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "in-memory"])
@pytest.mark.parametrize("case", sorted(BAD_KEYS))
def test_key_set_refusals_come_before_any_release_of_the_batch(streaming: bool,
                                                                case: str) -> None:
    """In memory, release 1 was drawn and recorded before release 2's key set was refused."""
    bad, message = BAD_KEYS[case]
    s = tabdp.Session(seed=1, streaming=streaming)
    with pytest.raises(ColumnTypeError, match=message):
        execute_planned(planned_releases(_frame(streaming), s, [GOOD, bad]))
    assert not s.records


# -- 3. the accessor's output names and grids ----------------------------------------------
@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "in-memory"])
def test_long_form_key_named_like_an_output_is_refused_when_planned(streaming: bool) -> None:
    """A key named like a long-form column is refused when planned.

    It failed with Polars' DuplicateError after release 1 was recorded and release 2's noise
    was drawn.
    """
    s = tabdp.Session(seed=1, streaming=streaming)
    bad = dict(kind="count", by="measure", keys=tabdp.KeySet.from_dict(measure=["a"]),
               name="bad", form="long")
    with pytest.raises(InvalidParameterError, match="output column of the long form"):
        planned_releases(_frame(streaming), s, [GOOD, bad])
    assert not s.records


# origin: review R6
@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "in-memory"])
def test_an_integer_measure_gets_the_accessors_whole_number_grid(streaming: bool) -> None:
    """A planned integer sum is the accessor's table.

    Planned, it was released on the mechanism's 0.01 grid as floats; through the accessor, on
    the whole-number grid as integers (other tables and noise).
    """
    req = dict(kind="sum", measures="y", by="c", keys=K, mechanism=mech.Gaussian(3.0),
               name="y")
    s1 = tabdp.Session(seed=7, streaming=streaming)
    one = _frame(streaming).dp.sum("y", by="c", keys=K, mechanism=mech.Gaussian(3.0),
                                   name="y", session=s1)
    s2 = tabdp.Session(seed=7, streaming=streaming)
    (planned,) = execute_planned(planned_releases(_frame(streaming), s2, [req]))
    assert planned.schema["y"] == pl.Int64
    assert planned.equals(one)
    assert s2.report().to_dict()["queries"] == s1.report().to_dict()["queries"]


# -- 4. cells by lookup: the join's cells on the edges (guards; these held) -------------------
def _date(days: int) -> Any:
    return pl.Series([days]).cast(pl.Date)[0]


LOOKUP_CASES: dict[str, tuple[pl.DataFrame, pl.DataFrame]] = {
    "empty-key-set": (pl.DataFrame({"i": pl.Series([1, 2, None], dtype=pl.Int32)}),
                      pl.DataFrame({"i": pl.Series([], dtype=pl.Int64)})),
    "all-null-key-column": (
        pl.DataFrame({"i": pl.Series([1, None, None], dtype=pl.Int8), "t": ["a", "a", "b"]}),
        pl.DataFrame({"i": pl.Series([None, None], dtype=pl.Int64), "t": ["a", "b"]})),
    "uint64-above-2^63": (
        pl.DataFrame({"i": pl.Series([2**64 - 1, 2**63, 5, None], dtype=pl.UInt64)}),
        pl.DataFrame({"i": pl.Series([-1, 5, 2**63 - 1, None], dtype=pl.Int64)})),
    "int64-vs-uint64-keys": (
        pl.DataFrame({"i": pl.Series([-1, 2**63 - 1, 5, None], dtype=pl.Int64)}),
        pl.DataFrame({"i": pl.Series([2**64 - 1, 2**63, 5, 2**63 - 1], dtype=pl.UInt64)})),
    "int8-keys-outside": (
        pl.DataFrame({"i": pl.Series([-128, 127, 5, None], dtype=pl.Int8)}),
        pl.DataFrame({"i": [-128, 127, 128, 255, -129, 5]})),
    "bool-null-key": (pl.DataFrame({"b": [True, False, None, True]}),
                      pl.DataFrame({"b": [True, None]})),
    "enum-vs-text": (
        pl.DataFrame({"t": pl.Series(["a", "b", None, "c"], dtype=pl.Enum(["c", "b", "a"]))}),
        pl.DataFrame({"t": ["a", None, "z"]})),
    "date-null": (pl.DataFrame({"d": [_date(0), _date(1), None]}),
                  pl.DataFrame({"d": [_date(1), None]})),
}


# origin: review R6
@pytest.mark.parametrize("case", sorted(LOOKUP_CASES))
def test_cells_by_lookup_equal_the_join_on_edge_keys(case: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row's cell (lazy and in memory) is the join's; the lookup path runs."""
    from tabdp.frame import _engine as engine

    df, key_frame = LOOKUP_CASES[case]
    keys = tabdp.KeySet.from_frame(key_frame)
    by = keys.columns
    assert engine._lookup_index(keys.to_polars(), by, df.schema) is not None

    def cells() -> list[list[Any]]:
        lazy = engine._cells(df.lazy(), df.schema, keys, by, "cell", ordered=True).collect()
        eager = engine._cells(df, df.schema, keys, by, "cell", ordered=True)
        return [lazy["cell"].to_list(), eager["cell"].to_list()]

    lookup = cells()
    assert lookup[0] == lookup[1]
    assert (key_frame.height == 0) != any(v is not None for v in lookup[0])  # rows in cells
    monkeypatch.setattr(engine, "_lookup_index", lambda *a: None)
    assert lookup == cells()


# origin: review R6
@pytest.mark.parametrize("kind", ["median", "foo", None])
def test_a_planned_release_of_another_kind_is_refused(kind: Any) -> None:
    """Any other kind was released as a count (a continuous Gaussian one) labelled ``kind``."""
    s = tabdp.Session(seed=1, streaming=True)
    with pytest.raises(InvalidParameterError, match="kind must be 'sum' or 'count'"):
        planned_releases(_frame(True), s, [dict(kind=kind, by="c", keys=K,
                                                 mechanism=mech.Gaussian(1.0))])
    with pytest.raises(InvalidParameterError, match=r"unknown argument\(s\) \['measure'\]"):
        planned_releases(_frame(True), s, [dict(kind="sum", measure="x", by="c", keys=K,
                                                 mechanism=mech.Gaussian(1.0))])
    assert not s.records
