"""Linked tables: Tau-Argus rounds until tables that share cells withhold them alike.

Two tables of one measure, county × industry (with the state level of the geography) and
state × industry × size, share the state × industry cells and the margins. Protected one by
one, each table withholds some shared cells the other publishes, and the joint audit pins
primary cells exactly; the linked rounds carry every withheld shared cell into the other table
as an a-priori suppression until the patterns agree, and then no primary cell is pinned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tabdp.compare.core import _audit_all, _canonical, _protect_linked
from tabdp.compare.sdc import SdcOptions, add_levels, build_dim, parse_sdc, protect
from tabdp.exceptions import InvalidParameterError


class _Geo:
    levels = ("state", "county")
    mapping = pl.DataFrame({"state": ["1", "1", "2", "2"],
                            "county": ["11", "12", "21", "22"]})


AXES = ["geo", "ind", "size"]


def _micro() -> pl.DataFrame:
    rng = np.random.default_rng(0)
    n = 60
    county = rng.choice(["11", "12", "21", "22"], n)
    return pl.DataFrame({"county": county, "state": [c[0] for c in county],
                         "ind": rng.choice(["a", "b", "c"], n),
                         "size": rng.choice(["s", "l"], n),
                         "pay": np.round(rng.lognormal(5, 1.5, n))})


def _tables(opts: SdcOptions, wd: Path) -> list[dict[str, Any]]:
    m = _micro()
    out = []
    for name, cols in (("A", ["county", "ind"]), ("B", ["state", "ind", "size"])):
        dims = [build_dim(c, m[c].unique().to_list(), {"geo": _Geo}) for c in cols]
        data = m.select([*cols, "pay"])
        tab = protect(data, cols, "pay", dims, opts, workdir=wd / name)
        cells = add_levels(tab.cells, cols, dims).with_columns(
            _canonical(cols, dims, AXES).alias("cell_key"))
        out.append({"table": name, "measure": "pay", "kind": "sum", "by": cols,
                    "dims": dims, "sdc": tab, "cells": cells, "micro": data, "audit": False})
    return out


def _pinned_primaries(tables: list[dict[str, Any]]) -> int:
    info = _audit_all(tables)
    assert len(info["groups"]) == 1 and info["groups"][0]["tables"] == ["A", "B"]
    return sum(x["cells"].filter((pl.col("status") == "U") & ~pl.col("protected")).height
               for x in tables)


def _withheld_published(tables: list[dict[str, Any]]) -> int:
    w = set().union(*(x["cells"].filter(~pl.col("published"))["cell_key"].to_list()
                      for x in tables))
    p = set().union(*(x["cells"].filter(pl.col("published"))["cell_key"].to_list()
                      for x in tables))
    return len(w & p)


@pytest.mark.slow  # 19 s of the local loop (2026-12-03): CI only
def test_linked_rounds_protect_what_independent_protection_leaves_pinned(
        tmp_path: Path) -> None:
    pytest.importorskip("pytauargus")
    opts = SdcOptions(p=10, secondary="MOD")
    tables = _tables(opts, tmp_path)
    # independent protection: shared cells withheld in one table, published in the other,
    # and the joint audit pins primary cells exactly (here 6 of them, 3 in each table)
    assert _withheld_published(tables) > 0
    assert _pinned_primaries(tables) == 6
    shared = next(x for x in tables if x["table"] == "A")["cells"].filter(
        (pl.col("status") == "U") & ~pl.col("protected"))
    assert np.allclose(shared["audit_lower"].to_numpy(), shared["value"].to_numpy())
    assert np.allclose(shared["audit_upper"].to_numpy(), shared["value"].to_numpy())
    info = _protect_linked(tables, opts, tmp_path, AXES, lambda _: None)
    assert info["applied"] and info["mode"] == "auto"
    (g,) = info["groups"]
    assert g["converged"] and g["reruns"] == 2
    assert all(n > 0 for n in g["forced_cells"].values())
    # consistent: no cell withheld in one table and published in the other
    assert _withheld_published(tables) == 0
    assert _pinned_primaries(tables) == 0
    for x in tables:
        f = x["cells"].filter(pl.col("forced"))
        assert f.height > 0 and (f["status"] == "M").all() and not f["published"].any()
        assert (f["lpl"] == 0).all()     # forced cells are secondary: no rule protection
    # the a-priori file Tau-Argus read on the last round
    hst = (tmp_path / "tau" / "A__pay__r2" / "job" / "linked.hst").read_text()
    assert ";U\n" in hst and ";PL;" in hst


@pytest.mark.slow  # CI only: a costly case the local loop leaves out (2-4 s)
def test_linked_off_and_rounding_leave_tables_alone(tmp_path: Path) -> None:
    pytest.importorskip("pytauargus")
    opts = SdcOptions(p=10, secondary="MOD", linked="off")
    tables = _tables(opts, tmp_path)
    info = _protect_linked(tables, opts, tmp_path, AXES, lambda _: None)
    assert not info["applied"] and "linked=off" in info["reason"]
    assert _pinned_primaries(tables) == 6
    rnd = _protect_linked(tables, SdcOptions(secondary="RND"), tmp_path, AXES,
                          lambda _: None)
    assert not rnd["applied"] and "rounding" in rnd["reason"]


def test_parse_linked() -> None:
    assert parse_sdc(None).linked == "auto"
    assert parse_sdc("linked=on").linked == "on"
    assert parse_sdc("p=10; linked=Off").as_dict()["linked"] == "off"
    with pytest.raises(InvalidParameterError, match="linked must be auto, on or off"):
        parse_sdc("linked=maybe")


def test_flat_codes_of_different_lengths_come_back_unpadded(tmp_path: Path) -> None:
    # Tau-Argus pads a flat dimension's codes to one length ("0" -> "   0"); the cells
    # must come back with the spec's codes (they name the same cells in other tables)
    pytest.importorskip("pytauargus")
    rng = np.random.default_rng(2)
    codes = ["0", "1-4", "1000+"]
    m = pl.DataFrame({"size": rng.choice(codes, 40), "pay": rng.lognormal(5, 1, 40)})
    dims = [build_dim("size", codes, {})]
    tab = protect(m, ["size"], "pay", dims, SdcOptions(p=10), workdir=tmp_path)
    assert sorted(tab.cells["size"].to_list()) == sorted(["Total", *codes])
    assert add_levels(tab.cells, ["size"], dims)["level"].to_list().count("national") == 1
