"""The plan's expected error of a consistent table is that of its published cells (review r78).

A consistent table publishes the consistent (GLS) estimate, whose sd is below the direct
release's and whose margin is ``z x sd`` for Gaussian noise and the certified margin otherwise
(review r84), not the noise law's quantile. The plan stated the direct release's sd and margin
(an exponential-polylog payroll table: margin 834,730 planned, 987,810 published).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tabdp.release import plan_summary
from tabdp.release.runner import run_release
from tabdp.release.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]


def _spec(tmp_path: Path) -> dict[str, Any]:
    state = [{"by": ["state"], "direct": True}]
    return {
        "release": {"name": "c", "level": 0.9},
        "input": {"path": str(ROOT / "data" / "cbp_sample.parquet"), "unit": "estab_id"},
        "hierarchies": {"geo": {"file": str(ROOT / "data" / "hierarchies" / "geography.csv"),
                                "levels": ["state", "county"]}},
        "output": {"public": str(tmp_path / "pub"), "confidential": str(tmp_path / "conf")},
        "randomness": {"seed": 3},
        "tables": [
            {"name": "n", "kind": "count", "by": ["county"], "consistent": True,
             "mechanism": {"family": "discrete_gaussian", "sigma": 2.0}, "rollups": state},
            {"name": "p", "measures": ["payroll"], "by": ["county"], "consistent": True,
             "mechanism": {"family": "gaussian", "sigma": 1e5}, "rollups": state},
        ],
    }


def test_plan_states_the_published_sd_and_margin_of_a_consistent_table(tmp_path: Path) -> None:
    spec = parse_spec(_spec(tmp_path), tmp_path)
    plan = {t["name"]: t for t in plan_summary(spec)["tables"]}
    pub = Path(run_release(spec, test_seed=True).public)
    for name, measure in (("n", "count"), ("p", "payroll")):
        out = pl.read_parquet(pub / f"{name}.parquet")
        sd = out["sd"].unique().to_list()
        assert len(sd) == 1
        for row in plan[name]["expected_error"][measure]:
            assert row["sd"] == pytest.approx(sd[0], rel=1e-9), (name, row)
            if name == "p":  # Gaussian: the margin is z x sd in every cell
                assert row["moe"] == pytest.approx(out["moe"][0], rel=1e-9)
            else:  # discrete noise: the certified margins, public, the plan states them
                assert row["moe"] == pytest.approx(float(out["moe"].median()), rel=1e-12)
