"""Measures, keys and units named like the Polars engines' internal columns were.

The in-memory engine added the rules' keep flag (``__keep``), key positions (``__pos``,
``__combo``) and max_cells ranks (``__size``, ``__rank``), and the streaming engine each
program's cell, rows and contributions (``__c<j>``, ``__r<j>``, ``__v<j>:<m>``), admission
flags (``ok<j>:<currency>``), charges (``crho<j>``, ``csize<j>``), the batch outputs
(``__replay``) and aggregates (``__n``, ``__released``, ``__tot:<m>``, ``fp:<column>``,
``worst_rho``, ``units``...), the confidential counters (``missing:<m>``, ``neg:<m>``...) and
the median's value flags next to the user's columns, which a column so named lost to or
clashed with: an integer measure ``__keep`` was summed from the keep flag, a float one raised.
They all start with ``tabdp.frame._engine.RESERVED`` now (refused for measures, keys and units).
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech

# ordinary names: key g, integer measure a, float measure b, unit u
_NAME_SETS = {
    "keep-int": {"g": "__c0", "a": "__keep", "b": "__v0:__keep", "u": "__r0"},
    "keep-float": {"g": "__pos", "a": "__n", "b": "__keep", "u": "__combo"},
    "fp-units": {"g": "fp:units", "a": "units", "b": "ok1:rows", "u": "__size"},
    "replay": {"g": "r0", "a": "__replay", "b": "crho0", "u": "__rank"},
    "charges": {"g": "__released", "a": "ok0", "b": "cell_rho", "u": "csize1"},
    "audit": {"g": "__combo", "a": "worst_rho", "b": "__tot:worst_rho", "u": "__pos"},
    "counters": {"g": "neg:cnt", "a": "cnt", "b": "missing:cnt", "u": "big:cnt"},
    "flags": {"g": "missing:v", "a": "inf:v", "b": "v", "u": "null:u"},
}


def _data() -> pl.DataFrame:
    n = 60
    return pl.DataFrame({"g": ["x", "y", "z", "w"] * (n // 4),
                         "a": [(7 * i) % 41 for i in range(n)],
                         "b": [float((5 * i) % 13) / 4 for i in range(n)],
                         "u": [i // 3 for i in range(n)]})


def _run(df: pl.DataFrame, names: dict[str, str], mode: str, budget: float | None
         ) -> list[Any]:
    g, a, b, u = (names[c] for c in "gabu")
    keys = tabdp.KeySet.from_dict(**{g: ["x", "y", "z"]})
    s = tabdp.Session(seed=7, budget=budget, track_cells=True,
                      unit=u if mode == "unit" else None, streaming=mode == "streaming")
    frame: Any = df.lazy() if mode == "streaming" else df
    out = [frame.dp.sum([a, b], by=g, keys=keys, mechanism=mech.Gaussian(30.0), session=s),
           frame.dp.count(by=g, keys=keys, mechanism=mech.Gaussian(2.0), session=s),
           frame.dp.sum(b, by=g, keys=keys, mechanism=mech.Gaussian(4.0), session=s),
           frame.dp.median(b, by=g, keys=keys, bounds=(0, 4), epsilon=1.0, session=s)]
    pr = pl.DataFrame(s.report().per_record)
    cells = [s.records[i].cells for i in range(len(out))]
    # compared by position: the output's names follow the input's
    return ([o.rows() for o in out] + [pr.sort(pr.columns[0]).rows()]
            + [None if c is None else pl.DataFrame(c).rows() for c in cells])


@pytest.mark.parametrize("budget", [None, 0.6], ids=["no-budget", "budget"])
@pytest.mark.parametrize("mode", ["row", "unit", "streaming"])
@pytest.mark.parametrize("which", list(_NAME_SETS))
def test_columns_named_like_internal_ones_are_read_from_the_data(which: str, mode: str,
                                                                 budget: float | None) -> None:
    """The same tables, per-record losses and cell audits as under ordinary names (one seed)."""
    df = _data()
    names = _NAME_SETS[which]
    want = _run(df, {c: c for c in names}, mode, budget)
    got = _run(df.rename(names), names, mode, budget)
    assert got == want


@pytest.mark.parametrize("mode", ["row", "unit", "streaming"])
def test_the_budget_filters_some_records(mode: str) -> None:
    """The budgeted runs above filter (the replayed admission flags are read)."""
    df, names = _data(), {c: c for c in "gabu"}
    for i in range(3):  # every sum and count: different tables
        assert _run(df, names, mode, 0.6)[i] != _run(df, names, mode, None)[i]


@pytest.mark.parametrize("names", [{"h": "__pos"}, {"a": "__size", "b": "__rank"},
                                   {"a": "__pos", "g": "__combo"},
                                   {"a": "__size", "b": "__rank", "h": "__pos"}],
                         ids=["key-pos", "size-rank", "measure-pos", "all"])
def test_max_cells_reads_measures_and_keys_named_like_its_columns(names: dict[str, str]
                                                                  ) -> None:
    """Unit mode's max_cells (cells ranked by size) and two keys' codes, under such names."""
    n = 60
    df = pl.DataFrame({"g": ["x", "y", "z", "w"] * (n // 4), "h": [i % 2 for i in range(n)],
                       "a": [(7 * i) % 41 for i in range(n)],
                       "b": [float((5 * i) % 13) / 4 for i in range(n)],
                       "u": [i // 5 for i in range(n)]})

    def run(names: dict[str, str]) -> list[Any]:
        g, h, a, b = (names.get(c, c) for c in "ghab")
        keys = tabdp.KeySet.from_dict(**{g: ["x", "y", "z"], h: [0, 1]})
        s = tabdp.Session(seed=7, unit="u", track_cells=True)
        out = df.rename(names).dp.sum([a, b], by=[g, h], keys=keys, max_cells=2,
                                      mechanism=mech.Gaussian(30.0), session=s)
        pr = pl.DataFrame(s.report().per_record)
        return [out.rows(), pr.sort(pr.columns[0]).rows(), pl.DataFrame(s.records[0].cells).rows()]

    assert run(names) == run({})


@pytest.mark.parametrize("mode", ["row", "unit", "streaming"])
def test_unread_columns_under_the_reserved_prefix_are_ignored(mode: str) -> None:
    """An input column named like an engine's own (``__tabdp_...``), read by no release.

    The engines' columns now take such names; the streaming engine drops these input columns
    first (its batch outputs were unnested next to them: a duplicate column before).
    """
    df = _data()
    n = df.height
    extra = df.with_columns(**{c: pl.Series([v] * n) for c, v in [
        ("__tabdp_keep", False), ("__tabdp_ok0:a", False), ("__tabdp_c0", 5),
        ("__tabdp_replay", 1), ("__tabdp_pos", 0), ("__tabdp_fp:a", 1), ("__tabdp_v0:a", 9)]})
    names = {c: c for c in "gabu"}
    assert _run(extra, names, mode, 0.6) == _run(df, names, mode, 0.6)


# -- review r29 --------------------------------------------------------------------------------
@pytest.mark.parametrize("extra", ["rho", "epsilon", "size", "epsilon_delta", "rho_pay"])
def test_a_streaming_report_next_to_columns_named_like_its_own(extra: str) -> None:
    """An unread input column named like a report column: the in-memory engine's report.

    The streaming report's fields (``rho``, ``size``...) were unpacked next to the input's
    columns, so an input column so named failed the report with the refusal meant for changed
    rows ("the input no longer holds the rows its releases read"): a false diagnosis.
    """
    df = _data().with_columns(pl.lit(1.5).alias(extra))
    keys = tabdp.KeySet.from_dict(g=["x", "y", "z"])
    reports = []
    for streaming in (False, True):
        s = tabdp.Session(seed=7, streaming=streaming)
        frame: Any = df.lazy() if streaming else df
        frame.dp.sum("a", by="g", keys=keys, mechanism=mech.Gaussian(5.0), session=s,
                     name="pay")
        reports.append(pl.DataFrame(s.report(delta=1e-6).per_record))
    assert reports[0].equals(reports[1])


def test_a_shared_streaming_pass_with_a_key_named_like_its_tags() -> None:
    """Two releases over the same cells in one streaming pass, a key named ``a#0#``.

    The pass's aggregations were tagged by a suffix (``a`` + ``#0#``), which a key so named
    met; the tags are a reserved prefix now: the same tables as with an ordinary key name.
    """
    from tabdp.frame._release import execute_planned, planned_releases

    def run(key: str) -> list[Any]:
        df = _data().rename({"g": key})
        keys = tabdp.KeySet.from_dict(**{key: ["x", "y", "z"]})
        s = tabdp.Session(seed=3, budget=0.6, streaming=True)
        out = execute_planned(planned_releases(df.lazy(), s, [
            {"kind": "sum", "measures": "a", "by": key, "keys": keys, "name": "p",
             "mechanism": mech.Gaussian(5.0)},
            {"kind": "sum", "measures": "a", "by": key, "keys": keys, "name": "q",
             "mechanism": mech.Gaussian(5.0)}]))
        return [pl.DataFrame(o).rows() for o in out]

    assert run("a#0#") == run("g")


@pytest.mark.parametrize("mode", ["row", "unit", "streaming"])
def test_a_key_named_like_the_cell_audits_columns_is_refused(mode: str) -> None:
    """With ``track_cells``, a key named ``worst_rho``, ``worst_size`` or ``units``: refused.

    The cell audit lists each cell's keys next to those columns (a raw duplicate-column error
    before); the refusal names only columns and comes before anything is read.
    """
    df = _data().rename({"g": "units"})
    keys = tabdp.KeySet.from_dict(units=["x", "y", "z"])
    s = tabdp.Session(seed=1, track_cells=True, unit="u" if mode == "unit" else None,
                      streaming=mode == "streaming")
    frame: Any = df.lazy() if mode == "streaming" else df
    with pytest.raises(tabdp.InvalidParameterError, match=r"group-by column\(s\) \['units'\] "
                       "have the name of a column of the cell audit"):
        frame.dp.sum("a", by="units", keys=keys, mechanism=mech.Gaussian(5.0), session=s)
    assert s.records == []
    # without the audit the name is an ordinary key
    frame.dp.sum("a", by="units", keys=keys, mechanism=mech.Gaussian(5.0),
                 session=tabdp.Session(seed=1, unit="u" if mode == "unit" else None,
                                       streaming=mode == "streaming"))


def test_a_median_by_a_unit_named_len() -> None:
    """An in-memory median whose unit column is named ``len``: the table of ``u``'s name."""
    df = _data()
    keys = tabdp.KeySet.from_dict(g=["x", "y", "z"])
    got = [df.rename({"u": unit}).dp.median("b", by="g", keys=keys, bounds=(0, 4), epsilon=1.0,
                                            session=tabdp.Session(seed=1, unit=unit)).rows()
           for unit in ("u", "len")]
    assert got[0] == got[1]


@pytest.mark.parametrize("unit", ["rho", "epsilon", "size", "epsilon_delta", "rho_lifetime",
                                  "Rho", "EPSILON_DELTA"])
def test_a_unit_named_like_a_report_column_is_refused(unit: str) -> None:
    """The per-record report lists each unit's id under its column's name next to ``rho``..."""
    with pytest.raises(tabdp.InvalidParameterError, match="name of a column of the per-record"):
        tabdp.Session(unit=unit)


@pytest.mark.parametrize(("unit", "name"), [("rho_pay", "pay"), ("RHO_PAY", "pay"),
                                            ("rho_pay", "PAY")])
@pytest.mark.parametrize("mode", ["memory", "lazy"])
def test_a_release_named_like_the_units_report_column_is_refused(mode: str, unit: str,
                                                                 name: str) -> None:
    """A release whose report column ``rho_<name>`` is the unit column's name: refused.

    The per-record report lists each unit's id under the unit column's name and the release's
    losses under ``rho_<name>``: with unit ``rho_pay`` and a release named ``pay`` the report's
    unit column held the release's losses (the units' ids lost, silently); refused before
    anything is read, in any letter case (Spark resolves names without regard to case).
    """
    df = _data().rename({"u": unit})
    frame: Any = df.lazy() if mode == "lazy" else df
    keys = tabdp.KeySet.from_dict(g=["x", "y", "z"])
    s = tabdp.Session(seed=1, unit=unit)
    with pytest.raises(tabdp.InvalidParameterError,
                       match=rf"name '{name}': the per-record report would list this "
                             rf"release's losses in column 'rho_{name}'.*unit column "
                             rf"'{unit}'.*\nHint: rename the release"):
        frame.dp.sum("a", by="g", keys=keys, mechanism=mech.Gaussian(5.0), session=s, name=name)
    assert s.records == []
    # another name: the report lists the units' ids
    frame.dp.sum("a", by="g", keys=keys, mechanism=mech.Gaussian(5.0), session=s, name="pay2")
    pr = pl.DataFrame(s.report().per_record)
    assert pr.columns == [unit, "rho", "epsilon", "size", "rho_pay2"]
    assert sorted(pr[unit].to_list()) == sorted(set(_data()["u"].to_list()))


def test_a_default_name_skips_the_units_report_column() -> None:
    """A release without a name never takes the unit column's report column (``q1_sum``)."""
    df = _data().rename({"u": "rho_q1_sum"})
    keys = tabdp.KeySet.from_dict(g=["x", "y", "z"])
    s = tabdp.Session(seed=1, unit="rho_q1_sum")
    df.dp.sum("a", by="g", keys=keys, mechanism=mech.Gaussian(5.0), session=s)
    assert [r.name for r in s.records] == ["q2_sum"]
    pr = pl.DataFrame(s.report().per_record)
    assert pr.columns == ["rho_q1_sum", "rho", "epsilon", "size", "rho_q2_sum"]
    assert sorted(pr["rho_q1_sum"].to_list()) == sorted(set(_data()["u"].to_list()))


@pytest.mark.parametrize("mode", ["row", "unit", "streaming"])
def test_release_names_differing_only_in_case_are_refused(mode: str) -> None:
    """``Pay`` then ``pay``: report columns ``rho_Pay`` and ``rho_pay``, ambiguous on Spark.

    Spark's report of such a session failed (an ambiguous reference) and its per-record file
    could not be written; the names are compared in any letter case on every engine.
    """
    keys = tabdp.KeySet.from_dict(g=["x", "y", "z"])
    s = tabdp.Session(seed=1, unit="u" if mode == "unit" else None,
                      streaming=mode == "streaming")
    frame: Any = _data().lazy() if mode == "streaming" else _data()
    frame.dp.sum("a", by="g", keys=keys, mechanism=mech.Gaussian(5.0), session=s, name="Pay")
    with pytest.raises(tabdp.InvalidParameterError,
                       match=r"name 'pay' is already used in this session \(names are "
                             r"compared in any letter case"):
        frame.dp.sum("a", by="g", keys=keys, mechanism=mech.Gaussian(5.0), session=s,
                     name="pay")
    assert [r.name for r in s.records] == ["Pay"]


def test_planned_releases_differing_only_in_case_are_refused() -> None:
    """Planned together (streaming): ``Pay`` and ``pay`` refused before anything is read."""
    from tabdp.frame._release import execute_planned, planned_releases

    keys = tabdp.KeySet.from_dict(g=["x", "y", "z"])
    s = tabdp.Session(seed=1, streaming=True)
    plan = planned_releases(_data().lazy(), s, [
        {"kind": "sum", "measures": "a", "by": "g", "keys": keys, "name": n,
         "mechanism": mech.Gaussian(5.0)} for n in ("Pay", "pay")])
    with pytest.raises(tabdp.InvalidParameterError,
                       match=r"\['Pay', 'pay'\] are already used .* \(in any letter case"):
        execute_planned(plan)
    assert s.records == []


def test_a_release_named_lifetime_in_a_session_with_a_ledger_is_refused(tmp_path: Any) -> None:
    """Its report column ``rho_lifetime`` was replaced by the units' lifetime losses."""
    pytest.importorskip("deltalake")
    keys = tabdp.KeySet.from_dict(g=["x", "y", "z"])
    with tabdp.Ledger.open(tmp_path / "led", series="s", lifetime_budget=100.0,
                           create=True) as led:
        s = tabdp.Session(seed=1, unit="u", ledger=led)
        with pytest.raises(tabdp.InvalidParameterError,
                           match=r"name 'Lifetime': .* column 'rho_Lifetime', where a session "
                                 "with a lifetime ledger lists each unit's lifetime loss"):
            _data().dp.sum("a", by="g", keys=keys, mechanism=mech.Gaussian(5.0), session=s,
                           name="Lifetime")
        assert s.records == []
    # without a ledger the name is an ordinary one
    s = tabdp.Session(seed=1, unit="u")
    _data().dp.sum("a", by="g", keys=keys, mechanism=mech.Gaussian(5.0), session=s,
                   name="lifetime")
    assert "rho_lifetime" in pl.DataFrame(s.report().per_record).columns
