"""Values beyond ±2**64: counted for the curator, and said in the public summary (review rev63p).

The engine holds every value within ±2**64 (exact fixed-point sums). A release with a payroll
of 1e30 (a data error) published about 1.8e19 for its cell, while the public summary said
"tabdp does not clip values" and no confidential output counted the clamped value (the
engine's count stopped before confidential.json).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
from _specs import release_spec, run_quiet, table, write_release


def _run(folder: Path, values: list[float]) -> Path:
    run_quiet(write_release(
        folder, pl.DataFrame({"county": ["a", "b", "a"], "payroll": values}),
        release_spec(table("pay", ["county"], '{ family = "laplace", scale = 1000.0 }',
                           measures=["payroll"]),
                     input_extra='negatives = "error"', domains={"county": ["a", "b"]}, seed=5)))
    return folder / "out"


def test_values_clamped_at_2_64_are_counted_and_stated(tmp_path: Path) -> None:
    out = _run(tmp_path / "big", [1e30, 5.0, 7.0])
    est = pl.read_parquet(out / "public" / "pay.parquet").sort("county")["estimate"].to_list()
    # the clamped value, with noise, on the grid that keeps 40 significant bits there
    assert abs(est[0] - 2.0**64) < 1e8
    conf = json.loads((out / "confidential" / "confidential.json").read_text("utf-8"))
    assert conf["releases"]["pay"]["values_clamped_to_2^64"] == {"payroll": 1}
    page = (out / "public" / "summary.html").read_text("utf-8")
    assert "every value is held within ±2<sup>64</sup>" in page
    # the public page does not depend on the data: the same without the huge value
    small = _run(tmp_path / "small", [3.0, 5.0, 7.0])
    conf = json.loads((small / "confidential" / "confidential.json").read_text("utf-8"))
    assert conf["releases"]["pay"]["values_clamped_to_2^64"] == {}
    # (but for the share of publishable cells, counted from the noisy estimates' flags)
    def settings(text: str) -> str:
        return re.sub(r'<div id="publishable">.*?</div>', "", text, flags=re.S)

    assert settings((small / "public" / "summary.html").read_text("utf-8")) == settings(page)
