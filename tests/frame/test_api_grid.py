"""A coarse ``grid=`` in the Python API is refused like a spec table's (review r36 F2/F3).

``frame.dp.sum`` / ``frame.dp.count`` and releases planned together (`release_requests`) refuse
a grid coarser than a tenth of the noise's sd before any data is read, with the spec path's
message (the one check, `tabdp.frame.coarse_grid`); grids tabdp picks itself (the whole-number
default of integer measures, a discrete mechanism's integers) are not refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

import tabdp
from tabdp.exceptions import InvalidParameterError, SpecError, TabdpError
from tabdp.frame.releases import release_requests
from tabdp.mechanisms import DiscreteGaussian, DiscreteLaplace, Gaussian, Laplace
from tabdp.release.spec import parse_spec

KEYS = tabdp.KeySet.from_dict(c=["a", "b"])
FRAME = pl.DataFrame({"c": ["a", "b", "a"], "x": [1.0, 2.0, 3.0], "n": [1, 2, 3]})

#: (kind, mechanism, its spec inline table, grid, allowed): the spec suite's boundary cases.
CASES = [
    ("sum", Gaussian(1000.0), {"family": "gaussian", "sigma": 1000.0}, 100.0, True),
    ("sum", Gaussian(1000.0), {"family": "gaussian", "sigma": 1000.0}, 100.001, False),
    ("sum", Gaussian(2.0), {"family": "gaussian", "sigma": 2.0}, 1.0, False),
    ("sum", Laplace(1e6), {"family": "laplace", "scale": 1e6}, 1e5, True),
    ("sum", DiscreteGaussian(2.0), {"family": "discrete_gaussian", "sigma": 2.0}, 1, True),
    ("count", DiscreteGaussian(40.0), {"family": "discrete_gaussian", "sigma": 40.0}, 4, True),
    ("count", DiscreteGaussian(40.0), {"family": "discrete_gaussian", "sigma": 40.0}, 5, False),
    ("count", DiscreteGaussian(2.0), {"family": "discrete_gaussian", "sigma": 2.0}, 10, False),
    ("count", DiscreteGaussian(0.5), {"family": "discrete_gaussian", "sigma": 0.5}, 1, True),
    ("count", Gaussian(3.0), {"family": "gaussian", "sigma": 3.0}, 0.5, False),
    ("count", Gaussian(3.0), {"family": "gaussian", "sigma": 3.0}, 1.0, True),  # discrete
    ("count", DiscreteLaplace(10.0), {"family": "discrete_laplace", "scale": 10.0}, 2, False),
]


def _accessor(kind: str, mech: Any, grid: Any, frame: Any = FRAME) -> Any:
    s = tabdp.Session(seed=1)
    if kind == "sum":
        return frame.dp.sum("x", by="c", keys=KEYS, mechanism=mech, grid=grid, session=s)
    return frame.dp.count(by="c", keys=KEYS, mechanism=mech, grid=grid, session=s)


def _spec_error(tmp_path: Path, kind: str, raw: dict[str, Any], grid: Any) -> SpecError | None:
    table = {"name": "t", "kind": kind, "by": ["c"], "mechanism": raw, "grid": grid,
             **({"measures": ["x"]} if kind == "sum" else {})}
    data = {"release": {"name": "g"}, "input": {"path": str(tmp_path / "d.parquet")},
            "domains": {"c": ["a", "b"]},
            "output": {"public": str(tmp_path / "p"), "confidential": str(tmp_path / "q")},
            "tables": [table]}
    try:
        parse_spec(data, tmp_path)
    except SpecError as e:
        return e
    return None


@pytest.mark.parametrize(("kind", "mech", "raw", "grid", "ok"), CASES)
def test_accessor_refuses_what_the_spec_refuses(tmp_path: Path, kind: str, mech: Any,
                                                raw: dict[str, Any], grid: Any,
                                                ok: bool) -> None:
    spec_err = _spec_error(tmp_path, kind, raw, grid)
    assert (spec_err is None) == ok
    if ok:
        assert _accessor(kind, mech, grid).height == 2
        return
    with pytest.raises(InvalidParameterError) as info:
        _accessor(kind, mech, grid)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TabdpError)
    text = str(info.value)
    assert text.startswith(f"grid={grid!r} is too coarse for ")
    assert "0.1 x the noise's sd" in text and "Hint: pass grid=None (or set a finer one)" in text
    assert "publication.round" in text and f"Publication(round={float(grid):g})" in text
    # the same words as the spec's: the message up to the hint, after the grid shown
    assert spec_err is not None
    ours = text.split("\nHint:")[0].removeprefix(f"grid={grid!r}")
    theirs = str(spec_err).split("\nHint:")[0].split(f"{grid!r}", 1)[1]
    assert ours == theirs


def test_message_names_grid_sd_and_limit() -> None:
    with pytest.raises(InvalidParameterError) as info:
        _accessor("sum", Gaussian(2.0), 1.0)
    text = str(info.value)
    assert "grid=1.0" in text and "(2)" in text and "i.e. 0.2," in text


def test_refused_before_any_data_is_read() -> None:
    def boom(s: pl.Series) -> pl.Series:
        raise AssertionError("the data was read")

    # a lazy frame whose values fail when computed: the grid is refused first
    lazy = FRAME.lazy().with_columns(pl.col("x").map_batches(boom, return_dtype=pl.Float64))
    s = tabdp.Session(seed=1)
    with pytest.raises(InvalidParameterError, match="too coarse"):
        lazy.dp.sum("x", by="c", keys=KEYS, mechanism=Gaussian(2.0), grid={"x": 1.0},
                    session=s)
    assert len(s.records) == 0  # nothing recorded


def test_planned_releases_refuse_a_coarse_grid_before_the_first_runs() -> None:
    s = tabdp.Session(seed=1)
    ok = dict(kind="count", by="c", keys=KEYS, name="ok")
    bad = dict(kind="sum", measures="x", by="c", keys=KEYS, mechanism=Gaussian(2.0), grid=1.0)
    with pytest.raises(InvalidParameterError, match=r"grid=1\.0 is too coarse"):
        release_requests(FRAME, s, [ok, bad])
    assert len(s.records) == 0


def test_grids_tabdp_picks_itself_are_not_refused() -> None:
    # an integer measure with small Gaussian noise gets the whole-number default (1 > 0.2)
    s = tabdp.Session(seed=1)
    out = FRAME.dp.sum("n", by="c", keys=KEYS, mechanism=Gaussian(2.0), session=s)
    assert out["n"].dtype == pl.Int64
    # a count with small Gaussian noise: its discrete counterpart's integers
    assert FRAME.dp.count(by="c", keys=KEYS, mechanism=Gaussian(0.5), session=s).height == 2
    # medians keep their own (relative) grid argument, unchecked here
    out = FRAME.dp.median("x", by="c", keys=KEYS, bounds=(0.0, 10.0), epsilon=1.0, grid=1.0,
                          session=s)
    assert out.height == 2
