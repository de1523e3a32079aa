"""The CV-flag line of the "Expected accuracy" plot, per table and noise law (review r51).

A cell is flagged C where sd / estimate >= cv_flag, i.e. moe / total >= cv_flag x moe / sd of
the table's own mechanism: 1.645 only for Gaussian noise at 90%.
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pytest
from _specs import release_spec, table

import tabdp.plotting as plotting
from tabdp import _figcache
from tabdp.release.runner import plan_summary
from tabdp.release.spec import load_spec
from tabdp.report.html import cv_flag_lines, render_summary_html

Z90 = NormalDist().inv_cdf(0.95)


def _summary(tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "s.toml"
    grid = "grid = 1e-6"
    path.write_text(release_spec(
        table("g", ["county"], '{ family = "gaussian", sigma = 790.0 }', measures=["payroll"],
              extra=grid),
        table("lap", ["county"], '{ family = "laplace", scale = 500.0 }', measures=["payroll"],
              extra=grid),
        table("n", ["county"], kind="count", extra="publication = { cv_flag = 0.2 }"),
        name="cv", release_extra="delta = 1e-9", domains={"county": ["a", "b"]}),
        encoding="utf-8")
    return plan_summary(load_spec(path))


def test_line_is_cv_flag_times_moe_per_sd_of_each_table(tmp_path: Path) -> None:
    lines = cv_flag_lines(_summary(tmp_path)["tables"])
    assert set(lines) == {"g: payroll", "lap: payroll", "n: count"}
    # Gaussian: cv_flag x z (the tiny grid adds nothing visible)
    assert all(p["rel_moe"] == pytest.approx(0.3 * Z90, rel=1e-6) for p in lines["g: payroll"])
    # Laplace at 90%: moe = b ln 10, sd = b sqrt 2
    lap = 0.3 * math.log(10) / math.sqrt(2)
    assert all(p["rel_moe"] == pytest.approx(lap, rel=1e-6) for p in lines["lap: payroll"])
    assert lap == pytest.approx(0.488, abs=1e-3) and lap != pytest.approx(0.3 * Z90, rel=1e-3)
    # the count's own cv_flag (0.2) and its discrete Gaussian sigma = 2 (sd 2, moe 3)
    assert all(p["rel_moe"] == pytest.approx(0.2 * 1.5) for p in lines["n: count"])


def test_summary_plot_gets_each_tables_line_and_caption(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    summary = _summary(tmp_path)
    seen: dict[str, Any] = {}
    real = _figcache.public_svg

    def spy(function: str, *args: Any, **kwargs: Any) -> str:
        if function == "moe_curves_svg":
            seen.update(kwargs)
        return real(function, *args, **kwargs)

    monkeypatch.setattr(_figcache, "public_svg", spy)
    page = render_summary_html(summary)
    assert seen["cv_lines"] == cv_flag_lines(summary["tables"])
    assert "cv_line" not in seen
    assert "for a symmetric noise law" not in page
    assert "n: count: 0.3 (cv flag 0.2 × moe / sd 1.5)" in page
    # the payroll panel draws the Gaussian and the Laplace thresholds, each named
    got = plotting._cv_thresholds(["g: payroll", "lap: payroll"], None, "CV flag",
                                  seen["cv_lines"])
    assert [(t, x, round(float(y[0]), 4)) for t, x, y in got] == [
        ("g: payroll: CV flag (cv = 0.3)", None, round(0.3 * Z90, 4)),
        ("lap: payroll: CV flag (cv = 0.3)", None, round(0.3 * math.log(10) / math.sqrt(2), 4))]


def test_transformation_threshold_follows_the_planned_totals() -> None:
    rows = [{"total": 10.0, "sd": 2.0, "moe": 3.0}, {"total": 100.0, "sd": 10.0, "moe": 18.0}]
    lines = cv_flag_lines([{"name": "t", "publication": {"cv_flag": 0.5},
                            "expected_error": {"x": rows}}])
    assert [p["rel_moe"] for p in lines["t: x"]] == [0.75, 0.9]
    ((text, x, y),) = plotting._cv_thresholds(["t: x"], None, "CV flag", lines)
    assert text == "CV flag (cv = 0.5)" and list(x) == [10.0, 100.0] and list(y) == [0.75, 0.9]
