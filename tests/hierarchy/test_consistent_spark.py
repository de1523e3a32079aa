"""A consistent table run with ``--engine spark``: the Polars run's public folder (issue 30).

The consistent estimate is computed once, above the engines, from the released levels; the
Spark engine releases the same cells with the same seed, so the published files are the same
bytes.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tabdp.datasets.synth import generate_establishments
from tests.release.test_spark_run import _files, _run, _spec

TABLES = """
[[tables]]
name = "cn"
kind = "count"
by = ["state", "naics2"]
mechanism = { family = "discrete_gaussian", sigma = 2.0 }
consistent = true
shares = { state_naics2 = 0.8, naics2 = 0.1, state = 0.1 }
integer = true
[[tables.rollups]]
by = ["naics2"]
direct = true
[[tables.rollups]]
by = ["state"]
direct = true
[[tables.rollups]]
by = []
"""


@pytest.mark.spark
def test_spark_consistent_table_is_the_polars_release(spark: Any, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    generate_establishments(160, seed=3).write_parquet(tmp_path / "data.parquet")
    spec = _spec(tmp_path, source='path = "data.parquet"', unit='unit = "firm_id"',
                 tables=TABLES)
    code, _, err = _run("run", str(spec), "--test-seed", "--quiet")
    assert code == 0, err
    shutil.move(tmp_path / "out", tmp_path / "polars")
    code, _, err = _run("run", str(spec), "--test-seed", "--quiet", "--engine", "spark")
    assert code == 0, err
    ref, got = _files(tmp_path / "polars" / "public"), _files(tmp_path / "out" / "public")
    assert sorted(got) == sorted(ref)
    assert {"cn.parquet", "cn__naics2.parquet", "cn__state.parquet",
            "cn__national.parquet"} <= set(got)
    assert not any(n.endswith("_direct.parquet") for n in got)
    for name in ref:
        assert got[name] == ref[name], name
    cn = pl.read_parquet(tmp_path / "out" / "public" / "cn.parquet")
    nat = pl.read_parquet(tmp_path / "out" / "public" / "cn__national.parquet")
    assert nat["estimate"][0] == cn["estimate"].sum()
    assert all(f.endswith("B") for f in cn["flag"].to_list())
