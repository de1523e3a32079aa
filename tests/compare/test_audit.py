"""The LP audit on tables whose attack intervals are known by hand, and the --sdc options."""

from __future__ import annotations

import numpy as np
import pytest

from tabdp.compare import audit_system, hierarchical_constraints, parse_sdc
from tabdp.compare.sdc import Dim, build_dim, hrc_text
from tabdp.exceptions import InvalidParameterError


def _one_dim(values: dict[str, float]) -> tuple[np.ndarray, object]:
    d = build_dim("k", list(values), {})
    v = np.array([sum(values.values()), *values.values()])
    return v, hierarchical_constraints([d])


def test_a_lone_suppressed_cell_is_recovered_exactly_from_its_margin() -> None:
    # total 10 = a 5 + b 3 + c 2; only a is withheld: a = 10 - 3 - 2
    v, a = _one_dim({"a": 5.0, "b": 3.0, "c": 2.0})
    pub = np.array([True, False, True, True])
    r = audit_system(a, v, pub, np.array([1]))
    assert r.lower.tolist() == [5.0] and r.upper.tolist() == [5.0]
    assert r.exact.tolist() == [1] and r.n_lp == 0


def test_a_second_suppression_protects_the_first() -> None:
    # a and b withheld: a + b = 10 - 2 = 8, each anywhere in [0, 8]
    v, a = _one_dim({"a": 5.0, "b": 3.0, "c": 2.0})
    pub = np.array([True, False, False, True])
    r = audit_system(a, v, pub, np.array([1, 2]))
    assert r.lower == pytest.approx([0.0, 0.0]) and r.upper == pytest.approx([8.0, 8.0])
    # four programmes; the first two solutions reach the propagated bounds (0 and 8) of
    # the other sides, which are then known without solving
    assert r.n_lp + r.skipped == 4 and r.n_lp == 2 and r.exact.size == 0


def test_two_by_two_table_with_margins() -> None:
    # interior 5 3 / 4 6, margins published, all four interior cells withheld:
    # x11 = t, x12 = 8 - t, x21 = 9 - t, x22 = 1 + t with t in [0, 8]
    rows, cols = build_dim("r", ["r1", "r2"], {}), build_dim("c", ["c1", "c2"], {})
    grid = np.array([[18, 9, 9], [8, 5, 3], [10, 4, 6]], dtype=float)  # (Total, r1, r2) x (...)
    a = hierarchical_constraints([rows, cols])
    assert a.shape == (3 + 3, 9)
    assert np.allclose(a @ grid.ravel(), 0.0)
    interior = np.array([4, 5, 7, 8])
    pub = np.ones(9, dtype=bool)
    pub[interior] = False
    r = audit_system(a, grid.ravel(), pub, interior)
    assert r.lower == pytest.approx([0, 0, 1, 1]) and r.upper == pytest.approx([8, 8, 9, 9])
    # an a-priori upper bound (Tau-Argus uses the largest cell) narrows nothing here, but a
    # lower bound of 2 on every cell does: t >= 2, 8 - t >= 2, so t in [2, 6]
    r2 = audit_system(a, grid.ravel(), pub, interior, lb=2.0, ub=18.0)
    assert r2.lower == pytest.approx([2, 2, 3, 3]) and r2.upper == pytest.approx([6, 6, 7, 7])


def test_hierarchy_equations_link_county_state_and_total() -> None:
    d = Dim("county", "geo", ("Total", "01", "02", "01001", "01003", "02001"),
            {"Total": "total", "01": "state", "02": "state", "01001": "county",
             "01003": "county", "02001": "county"},
            {"Total": ("01", "02"), "01": ("01001", "01003"), "02": ("02001",)})
    a = hierarchical_constraints([d]).toarray()
    assert a.tolist() == [[1, -1, -1, 0, 0, 0], [0, 1, 0, -1, -1, 0], [0, 0, 1, 0, 0, -1]]
    assert hrc_text(d) == "01\n@01001\n@01003\n02\n@02001\n"
    v = np.array([10.0, 7.0, 3.0, 4.0, 3.0, 3.0])
    # state 02 has one county: withholding both 02 and 02001 protects nothing (01 and the
    # total give 02 = 3, then 02001 = 3)
    pub = np.array([True, True, False, True, True, False])
    r = audit_system(a, v, pub, np.array([2, 5]))
    assert r.lower == pytest.approx([3, 3]) and r.upper == pytest.approx([3, 3])


def test_unbounded_without_a_margin() -> None:
    v, a = _one_dim({"a": 5.0, "b": 3.0})
    pub = np.array([False, False, True])
    r = audit_system(a, v, pub, np.array([0, 1]))
    assert r.lower == pytest.approx([3.0, 0.0]) and np.isinf(r.upper).all()


def test_parse_sdc() -> None:
    o = parse_sdc("p=10; nk=2,85; secondary=OPT")
    assert (o.p, o.nk, o.freq, o.secondary) == (10, (2, 85), None, "OPT")
    assert o.rules() == "P(10,1)|NK(2,85)" and o.suppress() == "OPT(1,10)"
    assert parse_sdc(None).secondary == "MOD"
    assert parse_sdc("secondary=rnd; base=100").suppress(100) == "RND(1,100,0,10,0,2)"
    for bad, what in [("p=0", "from 1 to 100"), ("nk=2", "nk must be"), ("secondary=GH", "GH"),
                      ("x=1", "unknown option"), ("p=none", "no primary rule"),
                      ("p10", "key=value")]:
        with pytest.raises(InvalidParameterError, match=what):
            parse_sdc(bad)


@pytest.mark.parametrize(("bad", "allowed"), [
    ("p=200", "Allowed: 1 to 100 or none, e.g. p=10."),
    ("p=x", "Allowed: 1 to 100 or none, e.g. p=10."),
    ("freq=0", "Allowed: 1 or more or none, e.g. freq=3."),
    ("secondary=RND; base=0", "Allowed: 1 or more, e.g. base=1000."),
    ("time=-3", "Allowed: 1 or more, e.g. time=10."),
])
def test_parse_sdc_states_each_options_own_range(bad: str, allowed: str) -> None:
    # review rev66w: base, time and freq were answered "Allowed: e.g. p=10", and p's and
    # freq's "none" was not among what is allowed
    key = bad.split(";")[-1].split("=")[0].strip()
    with pytest.raises(InvalidParameterError) as err:
        parse_sdc(bad)
    assert allowed in str(err.value), str(err.value)
    assert f"--sdc: {key} must be " in str(err.value)
    if key != "p":
        assert "p=10." not in str(err.value).split("\nHint")[0]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_skipped_programmes_change_no_interval(seed: int) -> None:
    # the audit proves many interval ends from propagated bounds that a solution reaches;
    # every interval must equal the one two plain linear programmes give
    from scipy.optimize import linprog

    rng = np.random.default_rng(seed)
    rows = build_dim("r", [f"r{i}" for i in range(5)], {})
    cols = build_dim("c", [f"c{j}" for j in range(6)], {})
    inner = rng.integers(0, 100, size=(5, 6)).astype(float)
    full = np.zeros((6, 7))
    full[1:, 1:] = inner
    full[0, 1:] = inner.sum(0)
    full[1:, 0] = inner.sum(1)
    full[0, 0] = inner.sum()
    v = full.ravel()
    a = hierarchical_constraints([rows, cols])
    pub = rng.random(v.size) > 0.45
    pub[0] = True
    targets = np.flatnonzero(~pub)
    r = audit_system(a, v, pub, targets)
    dense = a.toarray()
    unk = np.flatnonzero(~pub)
    a_u, b = dense[:, unk], -dense[:, pub] @ v[pub]
    for k, t in enumerate(targets):
        c = np.zeros(unk.size)
        c[list(unk).index(t)] = 1.0
        lo = linprog(c, A_eq=a_u, b_eq=b, bounds=(0, None), method="highs")
        hi = linprog(-c, A_eq=a_u, b_eq=b, bounds=(0, None), method="highs")
        assert r.lower[k] == pytest.approx(lo.fun, abs=1e-6)
        if hi.status == 3:
            assert np.isinf(r.upper[k])
        else:
            assert r.upper[k] == pytest.approx(-hi.fun, abs=1e-6)
    assert r.n_lp + r.skipped + 2 * r.exact.size == 2 * targets.size


def test_small_cell_beside_a_huge_one_is_judged_on_its_own_scale() -> None:
    # total = a + b + c with a = 1e9 published, b = 300 (primary, needs 250 above) and
    # c = 200 (secondary) withheld: b is in [0, 500], only 200 above its value. A slack of
    # 1e-6 of the largest cell (1,000) called it protected; it is not.
    import polars as pl

    from tabdp.compare.core import _audit_all, _sdc_risk
    from tabdp.compare.sdc import SdcTable

    d = build_dim("k", ["a", "b", "c"], {})
    cells = pl.DataFrame({
        "k": ["Total", "a", "b", "c"], "value": [1e9 + 500.0, 1e9, 300.0, 200.0],
        "freq": [30, 10, 5, 15], "x1": [9e8, 9e8, 200.0, 20.0], "x2": [1.0, 1.0, 50.0, 20.0],
        "status": ["S", "S", "U", "M"], "lpl": [0.0, 0.0, 100.0, 0.0],
        "upl": [0.0, 0.0, 250.0, 0.0], "published": [True, True, False, False],
        "cell_key": ["k=total:Total", "k=k:a", "k=k:b", "k=k:c"]})
    x = {"table": "t", "measure": "m", "kind": "sum", "by": ["k"], "dims": [d],
         "sdc": SdcTable([d], cells, "MOD"), "cells": cells}
    _audit_all([x])
    b = x["cells"].filter(pl.col("k") == "b").row(0, named=True)
    assert (b["audit_lower"], b["audit_upper"]) == pytest.approx((0.0, 500.0))
    assert b["protected"] is False
    risk = _sdc_risk([x])
    assert risk["records_pinned"] == 1
    assert risk["tables"][0]["withheld_cells_recovered_exactly"] == 0


def test_contributions_to_primary_cells_count_a_record_once_per_primary_cell() -> None:
    # "records_in_primary_cells" summed the primary cells' contributor counts: a record in two
    # primary cells was counted twice, not a number of records; the key says what it counts,
    # and the old name stays one release, deprecated, with the same value
    import polars as pl

    from tabdp.compare.core import _sdc_risk
    from tabdp.compare.sdc import SdcTable

    d = build_dim("k", ["a", "b"], {})
    cells = pl.DataFrame({
        "k": ["Total", "a", "b"], "value": [30.0, 10.0, 20.0], "freq": [3, 2, 2],
        "x1": [10.0, 6.0, 15.0], "x2": [5.0, 4.0, 5.0], "status": ["S", "U", "U"],
        "lpl": [0.0, 1.0, 1.0], "upl": [0.0, 1.0, 1.0], "published": [True, False, False],
        "cell_key": ["k=total:Total", "k=k:a", "k=k:b"],
        "audit_lower": [None, None, None], "audit_upper": [None, None, None],
        "protected": [None, None, None]},
        schema_overrides={"audit_lower": pl.Float64, "audit_upper": pl.Float64,
                          "protected": pl.Boolean})
    x = {"table": "t", "measure": "m", "kind": "sum", "by": ["k"], "dims": [d],
         "sdc": SdcTable([d], cells, "MOD"), "cells": cells}
    row = _sdc_risk([x])["tables"][0]
    # 3 records in all; one of them contributes to both primary cells: 4 contributions
    assert row["contributions_to_primary_cells"] == 4
    assert row["records_in_primary_cells"] == row["contributions_to_primary_cells"]


@pytest.mark.parametrize(("bad", "fix", "good"), [
    ("p=0.1", "write p=10 for 10 %", "p=10"),
    ("nk=2,0.85", "write nk=2,85 for 85 %", "nk=2,85"),
    ("p=0.15; nk=3,0.7", "write p=15 for 15 %", "p=15; nk=3,70"),
])
def test_sdc_fraction_where_a_percent_is_meant_gets_the_value_to_write(
        bad: str, fix: str, good: str) -> None:
    """``p`` and the dominance rule's ``k`` are whole percents; a fraction says so (stop 68)."""
    with pytest.raises(InvalidParameterError) as info:
        parse_sdc(bad)
    assert fix in str(info.value), str(info.value)
    parse_sdc(good)
