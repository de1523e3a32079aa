"""The HTML reports of a release: :mod:`tabdp.report.html`, the SVG figures and a browser check.

* realistic inputs built with tabdp itself: a session on ``data/cbp_sample.parquet`` (payroll and
  employment sums with a log transform, establishment counts with Gaussian noise), its public
  policy curves and its confidential per-record losses;
* both pages: parse as HTML, every ``<svg>`` closed, the sections and plot ids present, nothing
  loaded from the network (no ``src`` / ``href`` to a URL, a CSP forbidding it), every input
  string escaped, byte-identical output on a second rendering, edge cases (no units, all-zero
  losses, infinite ε, ``None`` values, empty frames);
* the plots: deterministic SVG, non-positive values dropped from log axes, the deterministic
  subsample of large scatters;
* headless Chromium: the plots are really drawn on the page (pixels of the plot colours), with a
  negative control (the same page without its plots has none).
"""

from __future__ import annotations

import copy
import math
import os
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

import tabdp
from tabdp import mechanisms as mech
from tabdp._svgchart import _subsample
from tabdp.exceptions import InvalidParameterError, UsabilityWarning
from tabdp.plotting import (
    PALETTE,
    histogram_svg,
    loss_curves_svg,
    moe_curves_svg,
    scatter_svg,
)
from tabdp.report.html import fmt, render_confidential_html, render_summary_html

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _browser as browser  # noqa: E402  (tests/_browser.py: headless Chromium, test-only)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "cbp_sample.parquet"
SIZES = [10.0**k for k in range(0, 9)]
TOTALS = [10.0**k for k in range(1, 9)]


# -- sample inputs --------------------------------------------------------------------------------
def _expected_error(m: Any, level: float) -> list[dict[str, float]]:
    t = np.array(TOTALS)
    sd = m.sd_at(t)
    moe = m.moe_at(t, level)
    return [{"total": float(a), "sd": float(b), "moe": float(c), "rel_moe": float(c / a)}
            for a, b, c in zip(t, sd, moe, strict=True)]


def _table_curve(rec: Any, copies: int = 1) -> list[dict[str, Any]]:
    """A unit with Δ in every measure of one cell (k measures, not joint): k times the curve.

    Times ``copies`` with directly released rollups.
    """
    k = len(rec.measures) * copies
    return [{**r, "rho": None if r["rho"] is None else k * r["rho"],
             "epsilon": None if r["epsilon"] is None else k * r["epsilon"]}
            for r in rec.policy_curve()]


@pytest.fixture(scope="module")
def sample() -> dict[str, Any]:
    """Summary and confidential-report inputs of a sample release (:func:`build_sample`)."""
    return build_sample()


@pytest.fixture(scope="module")
def pages(sample: dict[str, Any]) -> dict[str, str]:
    """Both pages of the sample, rendered once for the module."""
    return {"summary": render_summary_html(sample["summary"]),
            "confidential": render_confidential_html(sample["confidential"])}


def build_sample() -> dict[str, Any]:
    """A seeded state × sector release on (a slice of) the committed CBP sample."""
    df = pl.read_parquet(DATA).head(20000).with_columns(payroll_k=pl.col("payroll") / 1000.0)
    by = ["state", "naics2"]
    keys = tabdp.KeySet.from_dict(state=sorted(df["state"].unique().to_list()),
                                  naics2=sorted(df["naics2"].unique().to_list()))
    s = tabdp.Session(unit="estab_id", seed=1)
    pay = mech.LogTransform(sigma=0.3, offset=1000.0)
    cnt = mech.Gaussian(sigma=2.0)
    # sigma = 0.3: cv floor 0.307 >= 0.3, the accessor warns (parameters only)
    with pytest.warns(UsabilityWarning, match="coefficient of variation floor"):
        df.dp.sum(["payroll_k", "employment"], by=by, keys=keys, mechanism=pay, session=s,
                  name="state_naics2")
    df.dp.count(by=by, keys=keys, mechanism=cnt, session=s, name="establishments")
    rep = s.report(delta=1e-9)
    pub = {r["name"]: r for r in rep.to_dict()["queries"]}
    level = 0.9
    tables = []
    for rec, m in zip(s.records, (pay, cnt), strict=True):
        p = pub[rec.name]
        tables.append({
            "name": rec.name, "kind": rec.kind, "measures": list(rec.measures), "by": by,
            "cells": p["keys"]["size"],
            "keys": "cross product of domains", "null_policy": "error",
            "file": f"{rec.name}.parquet", "mechanism": p["mechanism"],
            "calibration": None if rec.kind == "count" else {
                "family": "log", "targets": {"1000.0": 2.5, "10000000.0": 500.0},
                "achieved": {"1000.0": 2.41, "10000000.0": 471.3}, "typical_total": 1e6,
                "notes": ["offset fixed at 1000", "objective: <auto> & sigma"]},
            "guarantee": "gaussian" if rec.kind == "count" else "zcdp",
            "grid": {mm: (1.0 if rec.kind == "count" else 1000.0) for mm in rec.measures},
            "publication": {"cv_flag": 0.3, "suppress_cv": None,
                            "negative": "flag" if rec.kind == "sum" else "clamp"},
            "policy_curve": rec.policy_curve(),
            "table_policy_curve": _table_curve(rec),
            "table_policy_curve_with_direct_rollups": _table_curve(
                rec, 2 if rec.kind == "count" else 1),
            "grid_applies_to": "the estimate",
            "expected_error": {mm: _expected_error(m, level) for mm in rec.measures},
            "rollups": [{"by": ["naics2"], "label": "naics2",
                         "file": f"{rec.name}__naics2.parquet", "cells": 19,
                         "moe_method": {mm: "normal approximation of the sum of cells"
                                        for mm in rec.measures},
                         "direct": rec.kind == "count",
                         "direct_file": (f"{rec.name}__naics2_direct.parquet"
                                         if rec.kind == "count" else None)}],
        })
    files = [t["file"] for t in tables] + ["manifest.json", "summary.json", "summary.html"]
    summary = {
        "tabdp_version": tabdp.__version__,
        "release": {"name": "cbp_sample", "title": "County Business Patterns (sample)",
                    "description": "Payroll, employment and establishments by state and sector.",
                    "level": level, "delta": 1e-9},
        "unit": "estab_id",
        "randomness": rep.to_dict()["session"]["randomness"],
        "input_policies": {"nulls": "error", "negatives": "zero"},
        "kind": "release",
        "budget": tabdp.Budget({1e3: 6.0, 1e7: 700.0}).to_dict(),
        "record_sizes": SIZES,
        "tables": tables,
        "total_policy_curve": rep.total_policy_curve(),
        "flag_codes": {"C": "cv >= threshold: low reliability", "N": "negative estimate",
                       "S": "suppressed: cv >= suppression threshold", "X": "structural zero"},
        "columns": {"<keys>": "grouping columns", "measure": "released measure",
                    "estimate": "noisy estimate", "sd": "standard deviation of the noise",
                    "moe": "90% margin of error", "cv": "sd / estimate", "flag": "flag codes"},
        "files": files,
    }
    per = rep.per_record
    agg = (df.group_by(by).agg(pl.col("payroll_k").max().alias("worst_size"),
                               pl.col("estab_id").n_unique().alias("units"))
           .sort(by))
    worst_pay = agg.with_columns(
        worst_rho=pl.Series(pay.rho(agg["worst_size"].to_numpy()))).select(
        *by, "worst_rho", "worst_size", "units")
    conf = {
        "release": summary["release"], "unit": "estab_id", "seed": 1,
        "budget": summary["budget"], "per_record": per,
        "total_policy_curve": rep.total_policy_curve(),
        "worst_cells": {"state_naics2": worst_pay,
                        "establishments": pl.DataFrame(schema={"state": pl.String,
                                                               "worst_rho": pl.Float64})},
        "counts": {r.name: {**r.confidential, "nulls": {"payroll_k": 0},
                            "negatives": {"policy": "zero", "clipped": 3, "dropped": 0}}
                   for r in s.records},
        "top_n": 20,
    }
    return {"summary": summary, "confidential": conf}


# -- HTML checks ----------------------------------------------------------------------------------
class _Checker(HTMLParser):
    """Collects tags, attributes and text; tracks <svg> nesting."""

    VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "wbr",
            "source", "track", "embed", "param"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.attrs: list[tuple[str, str, str | None]] = []
        self.ids: list[str] = []
        self.tags: list[str] = []
        self.text: list[str] = []
        self.svg_open = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for k, v in attrs:
            self.attrs.append((tag, k, v))
            if k == "id" and v is not None:
                self.ids.append(v)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for k, v in attrs:
            self.attrs.append((tag, k, v))
            if k == "id" and v is not None:
                self.ids.append(v)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            if tag in self.stack:
                while self.stack and self.stack.pop() != tag:
                    pass
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _check_page(page: str, *, urls_in_text: bool = False) -> _Checker:
    assert page.startswith("<!DOCTYPE html>")
    c = _Checker()
    c.feed(page)
    c.close()
    assert not c.errors, c.errors[:5]
    assert not c.stack, f"unclosed tags: {c.stack}"
    assert page.count("<svg") == page.count("</svg>")
    assert len(c.ids) == len(set(c.ids)), "duplicate element ids"
    # self-contained: no script, no stylesheet link, no resource from a URL
    assert "script" not in c.tags and "link" not in c.tags and "iframe" not in c.tags
    for tag, k, v in c.attrs:
        name = k.split(":")[-1]
        if name in ("src", "href", "srcset", "action", "data", "poster", "background"):
            assert v is not None
            assert v.startswith(("#", "data:image/png;base64,")), (tag, k, v[:80])
        if k.startswith("xmlns"):
            assert v in ("http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"), v
    for url in ([] if urls_in_text else re.findall(r"[a-z]+://[^\s\"'<>)]*", page)):
        assert url in ("http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"), url
    assert "url(" not in re.sub(r"url\(#[^)]*\)", "", page)  # only in-page SVG references
    assert "@import" not in page
    assert "default-src 'none'" in page
    return c


def test_summary_page_structure(pages: dict[str, str]) -> None:
    """The public page: sections, plot figures, every table and curve, the seeded warning."""
    page = pages["summary"]
    c = _check_page(page)
    for i in ("plot-loss", "plot-loss-eps", "plot-moe", "protected", "budget", "losses",
              "accuracy", "tables", "flags", "columns", "files", "table-state_naics2",
              "table-establishments"):
        assert i in c.ids, i
    assert re.search(r'<figure id="plot-loss"[^>]*>\s*<svg', page)
    assert re.search(r'<figure id="plot-moe"[^>]*>\s*<svg', page)
    text = "".join(c.text)  # <wbr> splits file names into several text nodes
    for s in ("County Business Patterns (sample)", "estab_id", "NOT FOR PRODUCTION",
              "LogTransform", "state_naics2__naics2.parquet",
              "establishments__naics2_direct.parquet", "normal approximation",
              "cv >= threshold: low reliability", "manifest.json", "tabdp 0.1.0",
              "does not clip values", "NOT FOR PUBLICATION", "CV flag"):
        assert s in text or s in page, s
    assert "Not for production" in text  # seeded: red warning box
    assert 'class="callout warn"' in page
    # every table's loss curve in the legend of plot 1, one panel per unit of measure (the
    # payroll + employment table and the count): no total across units
    loss_svg = page.split('id="plot-loss"')[1].split("</figure>")[0]
    for label in ("state_naics2", "establishments", "record size Δ (payroll_k + employment)",
                  "record size Δ (rows)"):
        assert f">{label}" in loss_svg, label
    assert ">total<" not in loss_svg.split("</svg>")[0]
    moe_svg = page.split('id="plot-moe"')[1].split("</figure>")[0]
    # payroll and employment share the mechanism but not a unit: a panel each
    for label in ("state_naics2: payroll_k", "state_naics2: employment", "establishments: count",
                  "true cell total (payroll_k)", "true cell total (rows)"):
        assert f">{label}<" in moe_svg, label
    # calibration targets vs achieved, expected error numbers
    assert "target ρ" in text and "achieved ρ" in text and "2.41" in text
    assert "10⁸" in text


def test_epsilon_delta_is_stated_as_its_definition(pages: dict[str, str]) -> None:
    """(ε, δ) in words is the definition, never "loss <= ε with probability 1 − δ" (r39).

    The ε values come from the zCDP → (ε, δ) conversion, which gives (ε, δ)-DP and not a
    bound on the loss holding with probability 1 − δ (Gaussian noise at ρ = 0.125: ε = 3.058
    at δ = 1e-9, yet P[L > 3.058] = 2.2e-9).
    """
    page = pages["summary"]
    for wrong in ("with probability at least 1 − δ", "except with probability δ",
                  "with probability 1 − δ"):
        assert wrong not in page, wrong
    assert ("for every set of possible published tables, the probability that the release "
            "falls in that set with the record in the data is at most e<sup>ε</sup> times "
            "the probability without it, plus δ") in page
    assert "not the probability that the loss exceeds ε" in page
    eps_fig = page.split('id="plot-loss-eps"')[1].split("</figure>")[0]
    assert "at most e<sup>ε</sup> times its probability without the record, plus δ" in eps_fig


def test_plan_page(sample: dict[str, Any]) -> None:
    """A plan (kind 'plan'): says no data was read; input rules, direct-rollup losses."""
    plan = copy.deepcopy(sample["summary"])
    plan["kind"] = "plan"
    plan["randomness"] = "secure (OS CSPRNG)"
    del plan["files"]
    page = render_summary_html(plan)
    c = _check_page(page)
    text = " ".join(c.text)
    assert "Release plan" in text and "no data has been read" in text
    assert "a plan writes no tables" in text and "Not for production" not in text
    assert {"plot-loss", "plot-moe"} <= set(c.ids)
    # input rules and the loss with directly released rollups
    assert "negative values are replaced by 0" in text
    assert "ρ, with the rollups released directly" in text


def test_plain_words_forecast_and_warnings(sample: dict[str, Any]) -> None:
    """Issue 16.

    The guarantee in words, the forecast of flagged/negative cells, configuration warnings (plan)
    and the share of publishable cells (release) have their own sections.
    """
    summ = copy.deepcopy(sample["summary"])
    summ["guarantee_in_words"] = ["a unit of size 1,000 loses at most rho = 0.5 over <all>"]
    summ["usability_issues"] = [{"path": "tables[0].mechanism", "message": "floor <0.307>"}]
    summ["tables"][0]["guarantee_in_words"] = ["a unit of size 5 loses at most rho = 0.25"]
    summ["tables"][0]["usability_issues"] = ["floor <0.307>"]
    summ["tables"][0]["forecast"] = [{"total": 1000.0, "p_flagged": 0.5, "p_negative": 0.25},
                                     {"total": 1e6, "p_flagged": None, "p_negative": 0.0}]
    summ["published_usability"] = {"state_naics2": {"payroll_k": {
        "cells": 4.0, "publishable_share": 0.75, "flagged_share": 0.25, "negative_share": 0.0}}}
    summ["publishable_in_words"] = ["state_naics2, payroll_k: 3 of 4 cells (75%) are publishable"]
    page = render_summary_html(summ)
    c = _check_page(page)
    text = " ".join(c.text)
    assert "words" in c.ids and 'href="#words"' in page
    assert "over &lt;all&gt;" in page            # escaped
    assert "a unit of size 1,000 loses at most rho = 0.5 over <all>" in text
    assert "a unit of size 5 loses at most rho = 0.25" in text
    assert "Warning: configuration problems" in text and "floor <0.307>" in text
    assert "Forecast of flagged and negative cells" in text
    assert "50.0%" in text and "25.0%" in text
    assert len(re.findall(r'<div id="publishable">', page)) == 1
    assert "3 of 4 cells (75%) are publishable" in text
    assert "Other information" not in text      # every new key has its own place
    # a plan has no published tables: no publishable block, the forecast is pointed to
    plan = copy.deepcopy(summ)
    plan["kind"] = "plan"
    del plan["published_usability"], plan["publishable_in_words"]
    page = render_summary_html(plan)
    assert 'id="publishable"' not in page and "forecast share" in page
    # nothing new to say: no section, no table-of-contents entry
    bare = copy.deepcopy(sample["summary"])
    page = render_summary_html(bare)
    assert 'id="words"' not in page and 'href="#words"' not in page


def test_confidential_page_structure(sample: dict[str, Any], pages: dict[str, str]) -> None:
    """The confidential page: banner, loss statistics, budget use, exposed units."""
    conf = sample["confidential"]
    page = pages["confidential"]
    c = _check_page(page)
    for i in ("plot-loss-hist", "plot-loss-size", "overview", "exposed", "cells", "handling"):
        assert i in c.ids, i
    text = " ".join(c.text)
    assert "CONFIDENTIAL — contains values derived from individual records; do not publish" in text
    assert "never clips values for sensitivity" in text
    per = conf["per_record"]
    top = per.sort("rho", descending=True).row(0, named=True)
    assert fmt(top["rho"]) in text and fmt(top["estab_id"]) in text
    # changed on purpose (issue 28): pure epsilon is infinite for the log transform, so epsilon
    # at delta is shown instead of a column of infinities, with one line on why
    assert "Pure ε is not shown" in text and "Largest ε (pure DP)" not in text
    overview = page.split('id="overview"')[1].split("</section>")[0]
    assert re.search(r"Units within 10% of the budget</th><td>1</td>", overview)
    assert re.search(r"Units over the budget</th><td>0</td>", overview)
    assert "Some units are over the budget" not in text
    assert "Seeded run" in text
    # top_n rows in the exposed-units table
    exposed = page.split('id="exposed"')[1].split("</section>")[0]
    assert exposed.count("<tr>") == 1 + conf["top_n"]


def test_deterministic(sample: dict[str, Any], pages: dict[str, str]) -> None:
    """Rendering twice gives the same bytes."""
    a = pages["summary"].encode()
    b = render_summary_html(copy.deepcopy(sample["summary"])).encode()
    assert a == b
    c1 = pages["confidential"].encode()
    c2 = render_confidential_html(dict(sample["confidential"])).encode()
    assert c1 == c2


def test_everything_is_escaped(sample: dict[str, Any]) -> None:
    """Markup in any input string is shown as text, never interpreted."""
    evil = "<script>alert(1)</script>"
    s = copy.deepcopy(sample["summary"])
    s["release"]["title"] = evil
    s["release"]["description"] = f'"{evil}" & more'
    s["flag_codes"]["<b>"] = evil
    s["tables"][0]["mechanism"]["params"]["note"] = evil
    s["tables"][0]["calibration"]["notes"].append(evil)
    s["files"].append("<img src=http://x/a.png>")
    s["extra_<i>"] = {"k": evil}
    page = render_summary_html(s)
    c = _check_page(page, urls_in_text=True)  # the URL above, shown as text
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert evil in " ".join(c.text)  # shown as text
    conf = dict(sample["confidential"])
    conf["release"] = {"name": evil, "title": evil}
    conf["counts"] = {evil: {"rows_read": 3, "nulls": {evil: 1}}}
    conf["worst_cells"] = {evil: pl.DataFrame({evil: [evil], "worst_rho": [1.0]})}
    page = render_confidential_html(conf)
    _check_page(page)
    assert "<script" not in page


def test_edge_cases() -> None:
    """No tables, no units, all-zero losses, infinite ε, None values, pandas input."""
    # minimal summary: no tables, nothing optional
    page = render_summary_html({})
    c = _check_page(page)
    assert "plot-loss" in c.ids and "plot-moe" in c.ids
    assert "no positive losses to plot" in page
    # zero units
    empty = pl.DataFrame(schema={"estab_id": pl.Int64, "rho": pl.Float64,
                                 "epsilon": pl.Float64, "size": pl.Float64})
    page = render_confidential_html({"release": {"name": "x"}, "unit": "estab_id",
                                     "per_record": empty, "budget": {"kind": "constant",
                                                                     "rho": 1.0}})
    c = _check_page(page)
    assert {"plot-loss-hist", "plot-loss-size"} <= set(c.ids)
    assert "No units." in page
    # all-zero rho, infinite epsilon, None values, a {"sizes", "rho"} budget, pandas input
    per = pl.DataFrame({"row": [0, 1, 2], "rho": [0.0, 0.0, 0.0],
                        "epsilon": [math.inf, 0.0, math.inf], "size": [0.0, 1.0, 5.0],
                        "epsilon_delta": [None, 0.0, 1.0]})
    page = render_confidential_html({
        "release": {"name": "x", "delta": 1e-9}, "unit": None, "seed": None,
        "per_record": per.to_pandas(), "budget": {"sizes": [1.0, 100.0], "rho": [1.0, 2.0]},
        "total_policy_curve": [{"delta": 1.0, "rho": None, "epsilon": None}],
        "worst_cells": {"q": None}, "counts": {"q": {"rows_read": None}}, "top_n": 0})
    c = _check_page(page)
    text = " ".join(c.text)
    # changed on purpose (issue 28): an infinite pure epsilon gives way to epsilon at delta
    assert "Largest ε (pure DP)" not in text and "Largest ε at δ" in text
    assert "no positive values to plot" in page
    assert "3 value(s)" in page  # the three zero losses are not on the log axis


def test_fmt() -> None:
    """Number formatting of the report tables."""
    assert fmt(0.3) == "0.3" and fmt(1000.0) == "1,000" and fmt(-2e-7) == "-2×10⁻⁷"
    assert fmt(float("-inf")) == "−∞" and fmt(float("nan")) == "NaN"
    assert fmt(np.int64(1234567)) == "1,234,567" and fmt(np.float64(0.5)) == "0.5"
    assert fmt(False) == "no" and fmt("a<b") == "a<b"


# -- plots ----------------------------------------------------------------------------------------
@pytest.mark.slow  # 13 s of the local loop (2026-12-03): CI only
def test_plots_are_deterministic_svg_without_headers() -> None:
    """Each plot is a bare, deterministic <svg> element; plots share no ids."""
    rows = [{"delta": d, "rho": 0.01 * d**0.5, "epsilon": None} for d in [0.0, *SIZES]]
    err = [{"total": t, "sd": 2.0, "moe": 3.3, "rel_moe": 3.3 / t} for t in TOTALS]
    v = np.geomspace(1e-3, 10.0, 300)
    for make in (lambda: loss_curves_svg({"a": rows, "total": rows}, title="L"),
                 lambda: moe_curves_svg({"a: x": err}, title="M", cv_line=0.5),
                 lambda: histogram_svg(v, title="H", xlabel="ρ"),
                 lambda: scatter_svg(v, v**2, title="S", xlabel="x", ylabel="y", curve=rows)):
        svg = make()
        assert svg.startswith("<svg") and svg.endswith("</svg>")
        assert "<?xml" not in svg and "DOCTYPE" not in svg and "<metadata" not in svg
        assert svg == make()
    # different plots (titles) do not share element ids
    a = loss_curves_svg({"a": rows}, title="one")
    b = loss_curves_svg({"a": rows}, title="two")
    ids_a = set(re.findall(r'id="([^"]+)"', a)) - {"figure_1", "axes_1", "patch_1", "patch_2"}
    ids_b = set(re.findall(r'id="([^"]+)"', b))
    assert not {i for i in ids_a & ids_b if re.fullmatch(r"[pm][0-9a-f]{10}", i)}


def test_loss_curves_skip_non_positive_values() -> None:
    """Log axes drop Δ ≤ 0, None and ≤ 0 values; '$' is literal text."""
    rows = [{"delta": 0.0, "rho": 0.0, "epsilon": 0.0},
            {"delta": 1.0, "rho": None, "epsilon": None},
            {"delta": 10.0, "rho": 2.0, "epsilon": None},
            {"delta": 100.0, "rho": 3.0, "epsilon": None}]
    svg = loss_curves_svg({"t": rows, "total": rows}, title="x")
    assert "no positive losses" not in svg and ">total = t<" in svg   # one line, both labels
    svg = loss_curves_svg({"t": rows}, title="x", key="epsilon")
    assert "no positive losses to plot" in svg
    # text with '$' is literal, not mathtext
    svg = loss_curves_svg({"cost $ and $x$": rows}, title="a $b$ c")
    assert "a $b$ c" in svg


def test_scatter_subsample_keeps_largest() -> None:
    """Large scatters: a deterministic subsample keeping the largest values."""
    rng = np.random.default_rng(0)
    y = rng.lognormal(size=5000)
    idx = _subsample(y, 500)
    assert idx.size <= 500 and np.all(np.diff(idx) > 0)
    largest = np.argsort(y)[-50:]
    assert set(largest) <= set(idx.tolist())
    assert np.array_equal(idx, _subsample(y, 500))
    assert np.array_equal(_subsample(y[:10], 500), np.arange(10))
    svg = scatter_svg(np.arange(1, 5001, dtype=float), y, title="t", xlabel="x", ylabel="y",
                      max_points=500)
    assert "500 of 5,000 units shown:" in svg
    with pytest.raises(ValueError):
        scatter_svg(np.ones(3), np.ones(2), title="t", xlabel="x", ylabel="y")


# -- headless Chromium ----------------------------------------------------------------------------
def _need_chromium() -> str:
    exe = browser.find_chromium()
    if exe is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("Chromium is missing: .ci/run must install the Debian package `chromium` "
                        "(or set TABDP_CHROMIUM) so the HTML reports can be checked in a browser.")
        pytest.skip("Chromium not installed (apt-get install chromium, or set TABDP_CHROMIUM)")
    return exe


def _colour_pixels(png: Path, colours: list[str], tol: int = 14) -> dict[str, int]:
    from PIL import Image

    with Image.open(png) as im:
        px = np.asarray(im.convert("RGB"), dtype=np.int16)
    out = {}
    for c in colours:
        rgb = np.array([int(c[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
        out[c] = int(np.all(np.abs(px - rgb) <= tol, axis=-1).sum())
    return out


def _strip_plots(page: str) -> str:
    return re.sub(r"<svg\b.*?</svg>", "", page, flags=re.S)


@pytest.mark.slow  # 9 s of the local loop (2026-12-03): CI only
def test_screenshot_shows_the_summary_plots(pages: dict[str, str], tmp_path: Path) -> None:
    """In Chromium the plot lines are drawn (and absent without the plots)."""
    _need_chromium()
    page = pages["summary"]
    # lines of the two first tab10 colours: tables 1 and 2 in the loss plot (a panel each:
    # their units differ), the first two curves of the accuracy plot
    colours = [PALETTE[0], PALETTE[1]]
    html_path = tmp_path / "summary.html"
    html_path.write_text(page, encoding="utf-8")
    png = browser.screenshot(html_path, tmp_path / "summary.png", width=1280, height=4000)
    from PIL import Image

    with Image.open(png) as im:
        assert im.size == (1280, 4000)
    got = _colour_pixels(png, colours)
    assert all(n > 400 for n in got.values()), got
    # negative control: the same page without its SVG plots has (almost) none of those pixels
    bare = tmp_path / "bare.html"
    bare.write_text(_strip_plots(page), encoding="utf-8")
    png0 = browser.screenshot(bare, tmp_path / "bare.png", width=1280, height=4000)
    got0 = _colour_pixels(png0, colours)
    assert all(n < 20 for n in got0.values()), got0


@pytest.mark.slow  # CI only: a costly case the local loop leaves out (3-6 s)
def test_screenshot_shows_the_confidential_plots(pages: dict[str, str], tmp_path: Path) -> None:
    """In Chromium the histogram bars are drawn (and absent without plots)."""
    _need_chromium()
    page = pages["confidential"]
    html_path = tmp_path / "conf.html"
    html_path.write_text(page, encoding="utf-8")
    png = browser.screenshot(html_path, tmp_path / "conf.png", width=1200, height=2000)
    got = _colour_pixels(png, [PALETTE[0]])  # histogram bars
    assert got[PALETTE[0]] > 2000, got
    bare = tmp_path / "bare.html"
    bare.write_text(_strip_plots(page), encoding="utf-8")
    got0 = _colour_pixels(browser.screenshot(bare, tmp_path / "bare.png", width=1200,
                                             height=2000), [PALETTE[0]])
    assert got0[PALETTE[0]] < 20, got0


def test_screenshot_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Missing, failing and hanging browsers; bad arguments."""
    page = tmp_path / "p.html"
    page.write_text("<p>x</p>", encoding="utf-8")
    monkeypatch.setenv("TABDP_CHROMIUM", str(tmp_path / "no-such-browser"))
    assert browser.find_chromium() is None
    with pytest.raises(InvalidParameterError, match="TABDP_CHROMIUM is set to"):
        browser.screenshot(page, tmp_path / "p.png")
    monkeypatch.setenv("TABDP_CHROMIUM", "")
    monkeypatch.setenv("PATH", str(tmp_path))  # no browser on PATH
    assert browser.find_chromium() is None
    with pytest.raises(InvalidParameterError, match="Debian package `chromium`"):
        browser.screenshot(page, tmp_path / "p.png")
    # a "browser" that fails: the error carries its output
    fake = tmp_path / "fake-chromium"
    fake.write_text("#!/bin/sh\necho 'boom: cannot render' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("TABDP_CHROMIUM", str(fake))
    assert browser.find_chromium() == str(fake)
    with pytest.raises(tabdp.TabdpError, match="boom: cannot render"):
        browser.screenshot(page, tmp_path / "p.png")
    # a browser that hangs is stopped (with its children) after the timeout
    slow = tmp_path / "slow-chromium"
    slow.write_text("#!/bin/sh\nexec /bin/sleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setenv("TABDP_CHROMIUM", str(slow))
    with pytest.raises(tabdp.TabdpError, match="did not finish within 0.5 s"):
        browser.screenshot(page, tmp_path / "p.png", timeout=0.5)
    with pytest.raises(InvalidParameterError, match="not found"):
        browser.screenshot(tmp_path / "missing.html", tmp_path / "p.png")
    with pytest.raises(InvalidParameterError, match="width"):
        browser.screenshot(page, tmp_path / "p.png", width=0)


def _line_data(ax: Any) -> list[tuple[tuple[float, ...], tuple[float, ...]]]:
    return [(tuple(map(float, ln.get_xdata())), tuple(map(float, ln.get_ydata())))
            for ln in ax.get_lines() if ln.get_label() and not ln.get_label().startswith("_")]


def test_loss_plot_has_one_unit_per_axis_and_no_hidden_series() -> None:
    """Record sizes of different units get their own axes; identical curves are one line."""
    from matplotlib import rc_context

    from tabdp.plotting import _RC, _loss_figure

    a = [{"delta": d, "rho": 0.01 * d**0.5} for d in SIZES]
    b = [{"delta": d, "rho": 0.02 * d**0.5} for d in SIZES]
    curves = {"pay_county": a, "pay_state": a, "staff": a, "n": b, "n_direct": b,
              "total": [{"delta": d, "rho": 9.0} for d in SIZES]}
    units = {"pay_county": "payroll", "pay_state": "payroll", "staff": "employment",
             "n": "rows", "n_direct": "rows"}
    with rc_context(_RC):
        fig = _loss_figure(curves, "L", "ρ", "rho", units)
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["payroll", "employment", "rows"]
    for ax, unit in zip(axes, ["payroll", "employment", "rows"], strict=True):
        assert ax.get_xlabel() == f"record size Δ ({unit})"
        data = _line_data(ax)
        assert len(data) == len(set(data)), unit          # no two lines with identical data
    labels = [[ln.get_label() for ln in ax.get_lines()] for ax in axes]
    # the two payroll tables are one line with both labels, plus their own total (2 × a)
    assert labels[0] == ["pay_county, pay_state", "total"]
    assert _line_data(axes[0])[1][1] == pytest.approx(tuple(2 * 0.01 * d**0.5 for d in SIZES))
    assert labels[1] == ["staff"]                          # one table: no total
    assert labels[2] == ["n, n_direct", "total"]
    # the given cross-unit total (9.0 everywhere) is drawn nowhere
    assert all(9.0 not in y for ax in axes for _, y in _line_data(ax))


def test_moe_plot_has_one_unit_per_axis_and_no_hidden_series() -> None:
    from matplotlib import rc_context

    from tabdp.plotting import _RC, _moe_figure

    err = [{"total": t, "moe": 3.3} for t in TOTALS]
    other = [{"total": t, "moe": 7.0} for t in TOTALS]
    curves = {"t: payroll": err, "u: payroll": err, "t: employment": err, "c: count": other}
    units = {"t: payroll": "payroll", "u: payroll": "payroll", "t: employment": "employment",
             "c: count": "rows"}
    with rc_context(_RC):
        fig = _moe_figure(curves, "M", 0.5, "CV flag", units)
    axes = fig.axes
    assert [ax.get_xlabel() for ax in axes] == ["true cell total (payroll)",
                                                "true cell total (employment)",
                                                "true cell total (rows)"]
    assert [[ln.get_label() for ln in ax.get_lines() if not ln.get_label().startswith("_")]
            for ax in axes] == [["t: payroll, u: payroll"], ["t: employment"], ["c: count"]]
    for ax in axes:
        data = _line_data(ax)
        assert len(data) == len(set(data))


def test_public_words_state_what_they_cover() -> None:
    """Review r72: the summary's input rules, loss sentence and CV rule say what they cover.

    * ``input.nulls`` governs measures only: a row whose key is missing is outside the key set
      and is left out (never a stop), so "the run stops if a used column has a missing value"
      was false for key columns (a null county ran through, the row unreleased);
    * a record's loss over the release is a function of its contribution to every cell it is
      in, not of its size alone (a record in three cells of a table pays three times);
    * the C flag compares sd with ``|estimate|`` (negative estimates are flagged too).
    """
    summary = {"unit": "estab_id",
               "tables": [{"name": "t", "kind": "sum", "publication": {"cv_flag": 0.3}}]}
    for rule in ("error", "zero", "drop"):
        page = render_summary_html({**summary, "input_policies": {"nulls": rule}})
        text = " ".join(_check_page(page).text)
        assert "used column" not in text, rule
        assert "missing value" in text and "measure" in text, rule
        assert "missing key" in text and "not released" in text, rule
    page = render_summary_html(summary)
    text = " ".join(_check_page(page).text)
    assert "privacy loss is a public function of its size" not in text
    assert "adds up over the cells it contributes to" in text
    assert "sd / |estimate|" in text and "(sd / estimate)" not in text
