"""Self-contained HTML reports of a release: public ``summary.html``, confidential report.

``summary.html`` (and a plan's ``plan.html``) may be published; ``confidential_report.html``
must stay inside the agency.

Both pages are single files: inline CSS, plots as inline SVG ([`plotting`][tabdp.plotting]), no
script, no external font, stylesheet or image, and a Content-Security-Policy that forbids the
browser to load anything. They print cleanly (``@media print``). Every piece of text taken from
the inputs is escaped with `html.escape`. Rendering is deterministic: the same input gives
the same bytes.

* [`render_summary_html`][tabdp.report.render_summary_html] renders the public summary of a release
  (``summary.json``): what is protected, the per-record loss curves, the expected errors, each
  table's mechanism and rules, the flag codes, the column dictionary and the file list. It holds
  nothing computed from records.
* [`render_confidential_html`][tabdp.report.render_confidential_html] renders the confidential
  report: each unit's actual loss (distribution, most exposed units), the worst cells and the
  data-handling counts. It must stay inside the agency.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tabdp._histogram import histogram_bin_index, histogram_edges
from tabdp._numeric import engine_thread
from tabdp.exceptions import InvalidParameterError
from tabdp.privacy.budget import Budget
from tabdp.privacy.ledger import PER_RECORD_ROW_GROUP
from tabdp.report import streaming as _streaming
from tabdp.report.streaming import (
    BatchedOrderStatistics,
    exact_quantiles,
    quantile_ranks,
    sortable_keys,
)

__all__ = ["render_summary_html", "render_confidential_html", "fmt", "LossStatistics",
           "loss_statistics"]

_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
_NONE = "—"


# -- formatting -----------------------------------------------------------------------------------
def fmt(x: Any) -> str:
    """Format a value for a report table (plain text; escape it before use in HTML).

    Numbers keep 4 significant digits: fixed notation between 0.001 and 10⁶ (thousands
    separated, whole numbers from 1,000 up), powers of ten outside; integers in full. ``None``
    is an em dash, infinities are ``∞``, booleans ``yes`` / ``no``.

    Args:
        x: A number, ``None``, a bool or anything else (shown with ``str``).

    Returns:
        The text.

    Example:
        >>> [fmt(v) for v in (None, True, 5700, 2.66918, 31.9439, 12345.6, 1e8, 5.55e-06,
        ...                   float("inf"), 0.0)]
        ['—', 'yes', '5,700', '2.669', '31.94', '12,346', '10⁸', '5.55×10⁻⁶', '∞', '0']
    """
    if x is None:
        return _NONE
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    if isinstance(x, (int, np.integer)):
        return f"{int(x):,}"
    if isinstance(x, (float, np.floating)):
        v = float(x)
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "∞" if v > 0 else "−∞"
        a = abs(v)
        if a == 0.0:
            return "0"
        if 1e-3 <= a < 1e6:
            if a >= 1000.0:
                return f"{v:,.0f}"
            return f"{v:.4g}"
        mant, exp = f"{v:.3e}".split("e")
        mant = mant.rstrip("0").rstrip(".")
        power = "10" + str(int(exp)).translate(_SUPERSCRIPT)
        if mant in ("1", "-1"):
            return power if mant == "1" else "−" + power
        return f"{mant}×{power}"
    return str(x)


def _e(x: Any) -> str:
    """Escaped text of any value (numbers through `fmt`)."""
    if isinstance(x, str):
        return html.escape(x)
    return html.escape(fmt(x))


def _float(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _code(x: Any) -> str:
    return f"<code>{_e(x)}</code>"


def _file(name: Any) -> str:
    """A file name as code, with line-break opportunities after ``__`` and before the suffix."""
    text = _e(name).replace("__", "__<wbr>").replace(".", "<wbr>.")
    return f"<code>{text}</code>"


def _codes(xs: Sequence[Any], sep: str = ", ") -> str:
    return sep.join(_code(x) for x in xs) if xs else "<em>none</em>"


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(
        x, (bool, np.bool_))


def _value(v: Any, depth: int = 0) -> str:
    """Any JSON-like value as HTML: mappings as small key/value tables, lists inline."""
    if isinstance(v, Mapping):
        if not v:
            return "<em>none</em>"
        if depth > 3:
            return _code(json.dumps(v, default=str, sort_keys=True))
        rows = "".join(f"<tr><th scope=\"row\">{_e(str(k))}</th><td>{_value(x, depth + 1)}</td>"
                       "</tr>" for k, x in v.items())
        return f'<table class="kv inner">{rows}</table>'
    if isinstance(v, (list, tuple)):
        if not v:
            return "<em>none</em>"
        if all(isinstance(x, Mapping) for x in v):
            return "".join(_value(x, depth + 1) for x in v)
        return ", ".join(_value(x, depth + 1) for x in v)
    if v is None:
        return _NONE
    if isinstance(v, str):
        return html.escape(v)
    return f'<span class="num">{_e(v)}</span>'


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, caption: str | None = None,
           cls: str = "data", raw: bool = False) -> str:
    """An HTML table.

    Cells are values (formatted and escaped; numbers right-aligned) unless ``raw`` (cells
    already HTML: tuples ``(html, is_numeric)``).
    """
    cap = f"<caption>{caption}</caption>" if caption else ""
    numeric = []
    for j in range(len(headers)):
        col = [r[j] for r in rows if j < len(r)]
        if raw:
            numeric.append(bool(col) and all(isinstance(c, tuple) and c[1] for c in col))
        else:
            numeric.append(any(_is_num(c) for c in col)
                           and all(_is_num(c) or c is None for c in col))
    head = "".join(f'<th scope="col" class="num">{h}</th>' if num else f'<th scope="col">{h}</th>'
                   for h, num in zip(headers, numeric, strict=True))
    body = []
    for row in rows:
        tds = []
        for c in row:
            if raw:
                text, num = c if isinstance(c, tuple) else (c, False)
            else:
                text, num = (_e(c), _is_num(c) or c is None)
            tds.append(f'<td class="num">{text}</td>' if num else f"<td>{text}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    if not rows:
        body.append(f'<tr><td colspan="{max(len(headers), 1)}" class="empty">no rows</td></tr>')
    return (f'<div class="table-wrap"><table class="{cls}">{cap}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _kv(pairs: Sequence[tuple[str, str]]) -> str:
    """A two-column fact table; values are HTML."""
    rows = "".join(f'<tr><th scope="row">{html.escape(k)}</th><td>{v}</td></tr>'
                   for k, v in pairs)
    return f'<div class="table-wrap"><table class="kv">{rows}</table></div>'


def _figure(fig_id: str, svg: str, caption: str) -> str:
    return (f'<figure id="{fig_id}" class="plot">{svg}'
            f"<figcaption>{caption}</figcaption></figure>")


def _section(sec_id: str, title: str, body: str) -> str:
    return f'<section id="{sec_id}"><h2>{html.escape(title)}</h2>{body}</section>'


def _anchor(prefix: str, name: str) -> str:
    """An id made of safe characters only (names may hold anything)."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "-" for c in name)
    return f"{prefix}-{safe}" if safe else prefix


# -- page shell -----------------------------------------------------------------------------------
_CSS = """
:root {
  --ink: #1d2733; --muted: #5a6675; --line: #d5dbe3; --zebra: #f4f6f9; --head: #e8edf3;
  --accent: #143d6b; --accent-soft: #e7eef7; --warn: #a4161a; --warn-soft: #fdecea;
  --ok: #1e5631; --ok-soft: #e9f5ec;
}
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body {
  margin: 0; color: var(--ink); background: #ffffff;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", "Noto Sans",
    "Liberation Sans", "DejaVu Sans", Arial, sans-serif;
  font-size: 16px; line-height: 1.5;
}
.page { max-width: 1120px; margin: 0 auto; padding: 0 28px 48px; }
header.masthead { background: var(--accent); color: #ffffff; padding: 26px 0 22px; }
header.masthead .page { padding-bottom: 0; }
header.masthead h1 { margin: 0 0 6px; font-size: 1.85rem; line-height: 1.2; font-weight: 650; }
header.masthead p { margin: 4px 0; color: #dce6f2; }
header.masthead .kicker {
  text-transform: uppercase; letter-spacing: 0.08em; font-size: 0.78rem; font-weight: 700;
  color: #bcd0e6; margin-bottom: 4px;
}
.meta { display: flex; flex-wrap: wrap; gap: 6px 22px; margin-top: 12px; font-size: 0.92rem; }
.meta span b { color: #ffffff; font-weight: 600; }
.meta span { color: #dce6f2; }
.banner {
  background: var(--warn); color: #ffffff; text-align: center; font-weight: 800;
  letter-spacing: 0.03em; padding: 14px 20px; font-size: 1.15rem;
  border-bottom: 4px solid #6a0d10;
}
.banner.top { position: sticky; top: 0; z-index: 10; }
.callout {
  border-left: 5px solid var(--accent); background: var(--accent-soft);
  padding: 12px 16px; margin: 16px 0; border-radius: 0 6px 6px 0;
}
.callout.warn { border-left-color: var(--warn); background: var(--warn-soft); color: #5c0b0e; }
.callout.ok { border-left-color: var(--ok); background: var(--ok-soft); }
.callout p { margin: 4px 0; }
nav.toc {
  margin: 22px 0 6px; padding: 12px 16px; border: 1px solid var(--line); border-radius: 6px;
  background: #fbfcfd; font-size: 0.93rem;
}
nav.toc b { margin-right: 8px; }
nav.toc a { color: var(--accent); text-decoration: none; margin-right: 14px;
  white-space: nowrap; }
nav.toc a:hover { text-decoration: underline; }
h2 {
  font-size: 1.4rem; margin: 38px 0 10px; padding-bottom: 6px;
  border-bottom: 2px solid var(--accent); color: var(--accent);
}
h3 { font-size: 1.15rem; margin: 26px 0 8px; color: var(--ink); }
h4 { font-size: 1rem; margin: 20px 0 6px; color: var(--muted); text-transform: uppercase;
  letter-spacing: 0.04em; font-size: 0.85rem; }
p { margin: 8px 0; max-width: 82ch; }
code {
  font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, "Liberation Mono",
    "DejaVu Sans Mono", monospace;
  font-size: 0.88em; background: #eef1f5; padding: 1px 5px; border-radius: 4px;
}
.table-wrap { overflow-x: auto; margin: 10px 0 14px; }
table { border-collapse: collapse; font-size: 0.9rem; }
table.data { min-width: 40%; }
table caption { caption-side: top; text-align: left; font-weight: 600; padding: 4px 0 6px;
  color: var(--muted); }
th, td { padding: 6px 12px; border-bottom: 1px solid var(--line); vertical-align: top;
  text-align: left; }
thead th { background: var(--head); border-bottom: 2px solid #b9c3cf; font-weight: 650;
  vertical-align: bottom; }
table.data > tbody > tr:nth-child(even) > td { background: var(--zebra); }
td.num, span.num { text-align: right; font-variant-numeric: tabular-nums;
  white-space: nowrap; }
th.num { text-align: right; }
td.empty { color: var(--muted); font-style: italic; text-align: center; }
table.kv th { background: transparent; color: var(--muted); font-weight: 600; width: 14em;
  white-space: nowrap; }
table.kv { min-width: 50%; }
table.kv.inner { min-width: 0; margin: 0; font-size: 0.95em; }
table.kv.inner th, table.kv.inner td { padding: 2px 10px 2px 0; border: 0; width: auto; }
figure.plot {
  margin: 18px 0 26px; padding: 14px 14px 10px; border: 1px solid var(--line);
  border-radius: 8px; background: #ffffff; break-inside: avoid; page-break-inside: avoid;
}
figure.plot svg { display: block; width: 100%; max-width: 900px; height: auto; margin: 0 auto; }
figure.plot figcaption { color: var(--ink); font-size: 0.93rem; margin-top: 8px;
  padding-top: 8px; border-top: 1px solid var(--line); }
.tables-grid { display: flex; flex-wrap: wrap; gap: 0 26px; }
.tables-grid > div { flex: 1 1 300px; }
.badge {
  display: inline-block; font-size: 0.75rem; font-weight: 700; text-transform: uppercase;
  letter-spacing: 0.05em; padding: 2px 8px; border-radius: 10px; vertical-align: middle;
  background: var(--accent-soft); color: var(--accent); margin-left: 6px;
}
.badge.warn { background: var(--warn-soft); color: var(--warn); }
.table-section { margin-top: 34px; }
.table-section > h3 { font-size: 1.3rem; border-left: 6px solid var(--accent);
  padding: 2px 0 2px 12px; background: linear-gradient(90deg, var(--accent-soft), #ffffff 70%); }
ul.files { columns: 2; column-gap: 32px; padding-left: 20px; }
ul.notes li { margin: 3px 0; }
footer { margin-top: 40px; padding-top: 12px; border-top: 1px solid var(--line);
  color: var(--muted); font-size: 0.85rem; }
@media (max-width: 700px) { .page { padding: 0 14px 32px; } ul.files { columns: 1; } }
@media print {
  body { font-size: 11pt; }
  .page { max-width: none; padding: 0; }
  nav.toc { display: none; }
  header.masthead, .banner, .callout, thead th, table.data > tbody > tr:nth-child(even) > td {
    -webkit-print-color-adjust: exact; print-color-adjust: exact;
  }
  h2, h3 { break-after: avoid; page-break-after: avoid; }
  figure.plot, table { break-inside: avoid; page-break-inside: avoid; }
  .table-wrap { overflow: visible; }
  .banner { position: static; }
}
"""

_CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src 'none'; "
        "script-src 'none'; connect-src 'none'; form-action 'none'; base-uri 'none'")


def _page(title: str, version: str, body: str, *, banner: str = "") -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="tabdp {html.escape(version)}">\n'
        '<meta name="robots" content="noindex">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"{banner}{body}\n</body>\n</html>\n")


def _toc(items: Sequence[tuple[str, str]]) -> str:
    links = "".join(f'<a href="#{i}">{html.escape(t)}</a>' for i, t in items)
    return f'<nav class="toc" aria-label="Contents"><b>Contents</b>{links}</nav>'


def _level_text(level: Any) -> str:
    lv = _float(level)
    return f"{lv:.0%}" if lv is not None and 0 < lv < 1 else "the stated"


def _release_title(release: Mapping[str, Any]) -> str:
    return str(release.get("title") or release.get("name") or "tabdp release")


# -- public summary -------------------------------------------------------------------------------
_GUARANTEE = {
    "gaussian": "zero-concentrated DP from a Gaussian-type noise shift (exact (ε, δ) "
                "conversion)",
    "zcdp": "zero-concentrated DP (pure ε-DP where ε is finite)",
    "approx": "approximate (ε, δ)-DP only: ρ is infinite; the loss is stated as ε at the "
              "mechanism's δ",
}
_NEGATIVE = {
    "flag": "negative estimates are published as they are and flagged N",
    "clamp": "negative estimates are published as 0 and flagged N (post-processing, biased "
             "upward: for an empty cell by half the noise's mean absolute error, about 0.4 sd "
             "for Gaussian noise and at most 0.5 sd for any symmetric noise)",
}
#: A missing key is outside the key set under every rule (not released; how many rows: only in
#: the confidential outputs), so the words say it: review r72 found "the run stops if a used
#: column has a missing value" false for key columns.
_MISSING_KEY = ("; a row with a missing key is outside the public key set: not released (how "
                "many: confidential)")
_NULLS = {
    "error": "the run stops if a measure has a missing value" + _MISSING_KEY,
    "zero": "a missing value of a measure counts as 0" + _MISSING_KEY,
    "drop": "rows with a missing value in a measure are left out" + _MISSING_KEY,
}
_NEGATIVE_INPUT = {
    "error": "the run stops if a measure has a negative value",
    "allow": "negative values are kept (signed measures)",
    "zero": "negative values are replaced by 0 (counted in the confidential report)",
    "drop": "rows with a negative value are left out (counted in the confidential report)",
}
_MODES = {
    "curator": "strict data-quality rules may stop the run (one generic failure; details only "
               "for the curator)",
    "author": "every data-quality rule is declared in the spec, so no value in the data can "
              "stop the run",
}
_NONFINITE = {
    "error": "the run stops if a measure has an infinite value",
    "zero": "infinite values count as 0",
    "drop": "rows with an infinite value are left out",
    "clamp": "infinite values are replaced by the measure's public bounds",
}
_UNIT_NULLS = {
    "error": "the run stops if a row has no unit id",
    "drop": "rows without a unit id are left out",
}
_SUMMARY_KEYS = {"tabdp_version", "release", "unit", "randomness", "budget", "record_sizes",
                 "tables", "total_policy_curve", "flag_codes", "columns", "files", "kind",
                 "input_policies", "not_for_publication", "not_for_publication_reasons",
                 "guarantee_in_words",
                 "usability_issues", "published_usability", "publishable_in_words", "lifetime",
                 "total_policy_curve_description"}
_TABLE_KEYS = {"name", "kind", "statistic", "measures", "by", "cells", "file", "mechanism",
               "calibration", "guarantee", "grid", "publication", "policy_curve",
               "table_policy_curve", "expected_error", "rollups", "keys", "grid_applies_to",
               "null_policy",
               "table_policy_curve_with_direct_rollups", "guarantee_in_words", "forecast",
               "usability_issues", "consistent", "forecast_by_level"}


def _table_curve(t: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The loss curve of a table as a whole.

    One cell of it (every measure) and of each of its directly released rollups when given,
    else one cell, else one measure cell.
    """
    return list(t.get("table_policy_curve_with_direct_rollups") or t.get("table_policy_curve")
                or t.get("policy_curve") or [])


def _curve_unit(t: Mapping[str, Any]) -> str:
    """The unit of measure of a table's record sizes and cell totals, for the plots' panels.

    Each summed measure is a currency of its own (its values' unit); a count's is ``rows``. A
    table of several measures gets their names joined (its curve charges all of them).
    """
    if t.get("kind") == "count":
        return "rows"
    measures = [str(m) for m in (t.get("measures") or [])]
    return " + ".join(measures) if measures else "?"


def _has(rows: Any, key: str) -> bool:
    return bool(rows) and any(isinstance(r, Mapping) and r.get(key) is not None for r in rows)


def _at_sizes(rows: Sequence[Mapping[str, Any]], sizes: Sequence[Any]) -> list[Mapping[str, Any]]:
    """Curve rows at the record sizes of the release (all rows if none match)."""
    want = {float(s) for s in sizes if _float(s) is not None}
    picked = [r for r in rows if _float(r.get("delta")) in want]
    return picked or list(rows)


def _budget_html(budget: Any, *, public: bool = True, lifetime: Any = None) -> str:
    """The Budget section: the per-release budget and, with a ledger, the lifetime budget."""
    if not isinstance(lifetime, Mapping) or lifetime.get("lifetime_budget") is None:
        return _release_budget_html(budget, public=public)
    if budget is None:
        head = ("<p>No per-release budget was set (<code>[budget]</code>): within this "
                "release the losses are those of the curves below. The series' lifetime "
                "budget limits each unit's loss over the series.</p>")
    else:
        head = _release_budget_html(budget, public=public)
    return head + _lifetime_budget_html(lifetime)


def _lifetime_budget_html(life: Mapping[str, Any]) -> str:
    """The lifetime budget of a ledger's series (public: from the spec and the ledger's terms)."""
    budget = life.get("lifetime_budget")
    series = life.get("series")
    of = f" {_e(repr(series))}" if series is not None else ""
    pts = _budget_points(budget) if isinstance(budget, Mapping) else []
    rho = _float(budget.get("rho")) if isinstance(budget, Mapping) else None
    filt = ("It is enforced as an individual filter over the series: a unit whose loss over "
            "the series would pass it is left out of that table (the table is still released, "
            "without its contributions).")
    if isinstance(budget, Mapping) and budget.get("kind") == "constant" and rho is not None:
        return (f"<h3>Lifetime budget of the series{of}</h3><p>The lifetime budget of the "
                f"series' ledger limits each unit's total loss over every release of the "
                f"series, this one included, to ρ ≤ <b>{_e(budget.get('rho'))}</b>, whatever "
                f"its size, over every currency. {filt}</p>")
    if pts:
        total = _float(budget.get("total")) if isinstance(budget, Mapping) else None
        cap = ("" if total is None else
               f" In all, over every currency, at most ρ ≤ <b>{_e(total)}</b>.")
        return (f"<h3>Lifetime budget of the series{of}</h3><p>The lifetime budget curve of "
                "the series' ledger (below: record size → ρ limit) limits each unit's loss "
                "over every release of the series, this one included, at its size, in each "
                f"currency (each measure, and rows for counts) separately.{cap} {filt}</p>"
                + _table(["record size", "lifetime ρ limit"], [[s, r] for s, r in pts]))
    return (f"<h3>Lifetime budget of the series{of}</h3><p>The lifetime budget of the series' "
            "ledger (below) limits each unit's loss over every release of the series, this "
            f"one included. {filt}</p>" + _value(budget))


def _release_budget_html(budget: Any, *, public: bool = True) -> str:
    if budget is None:
        return ("<p>No per-record budget was set: the losses are those of the curves "
                "below, with no additional limit.</p>" if public else
                "<p>No per-record budget was set.</p>")
    if isinstance(budget, Mapping):
        kind = budget.get("kind")
        pts = _budget_points(budget)
        if kind == "constant" or (kind is None and _float(budget.get("rho")) is not None):
            text = (f"<p>Every record's total loss is limited to ρ ≤ <b>{_e(budget.get('rho'))}"
                    "</b>, whatever its size, over every currency. It is enforced as an "
                    "individual filter: a record whose loss would pass it is left out of that "
                    "table (the table is still released, without its contributions).</p>")
            rest = {k: v for k, v in budget.items() if k not in ("kind", "rho")}
        elif pts:
            text = ("<p>Each record's total loss is limited by a curve depending on its size "
                    "(its largest contribution to a released cell), in each currency (each "
                    "measure, and rows for counts) separately. It is enforced as an individual "
                    "filter: a record whose loss would pass it is left out of that table (the "
                    "table is still released, without its contributions).</p>" +
                    _table(["record size", "ρ limit"], [[s, r] for s, r in pts]))
            rest = {k: v for k, v in budget.items()
                    if k not in ("kind", "points", "sizes", "rho")}
        else:
            return _value(budget)
        return text + (_kv([(str(k), _value(v)) for k, v in rest.items()]) if rest else "")
    return _value(budget)


def _budget_points(budget: Mapping[str, Any]) -> list[tuple[float, float]]:
    if isinstance(budget.get("points"), (list, tuple)):
        return [(float(p[0]), float(p[1])) for p in budget["points"]]
    sizes, rho = budget.get("sizes"), budget.get("rho")
    if isinstance(sizes, (list, tuple)) and isinstance(rho, (list, tuple)):
        return [(float(s), float(r)) for s, r in zip(sizes, rho, strict=False)]
    return []


def _budget_object(budget: Any) -> Budget | None:
    """A `Budget` from its public dict (``to_dict`` form, or ``sizes`` / ``rho``)."""
    if budget is None:
        return None
    try:
        if isinstance(budget, Budget):
            return budget
        if isinstance(budget, Mapping):
            pts = _budget_points(budget)
            if pts:
                return Budget(dict(pts))
            if _float(budget.get("rho")) is not None:
                return Budget(float(budget["rho"]))
            return None
        return Budget.coerce(budget)
    except (ValueError, TypeError):
        return None


def _loss(v: Any) -> Any:
    """A loss from a policy curve: ``None`` there means infinite (no bound of that kind)."""
    return math.inf if v is None else v


def _pure_eps_infinite(rows: Sequence[Mapping[str, Any]]) -> bool:
    """True when pure ε is infinite at every size and ε at δ is there to show instead."""
    return bool(rows) and all(r.get("epsilon") is None for r in rows) and \
        _has(rows, "epsilon_delta")


def _loss_columns(rows: Sequence[Mapping[str, Any]], delta: Any) -> list[tuple[str, str]]:
    cols = [("rho", "ρ"), ("epsilon", "ε (pure DP)")]
    if _pure_eps_infinite(rows):  # Gaussian-type noise: ε at δ instead of a column of ∞
        cols = [("rho", "ρ")]
    if _has(rows, "epsilon_delta"):
        cols.append(("epsilon_delta", f"ε at δ = {_e(delta) if delta is not None else 'δ'}"))
    if _has(rows, "epsilon_at_dp_delta"):
        cols.append(("epsilon_at_dp_delta", "ε at the mechanism's δ"))
    return cols


def _policy_overview(summary: Mapping[str, Any], tables: Sequence[Mapping[str, Any]]) -> str:
    """Δ × (ρ of each table's cell, total ρ / ε / ε(δ)) table."""
    total = list(summary.get("total_policy_curve") or [])
    sizes = summary.get("record_sizes") or []
    base = _at_sizes(total, sizes) if total else []
    if not base:
        return ""
    delta = (summary.get("release") or {}).get("delta")
    per_table = []
    for t in tables:
        curve = _table_curve(t)
        per_table.append((str(t.get("name", "?")),
                          {_float(r.get("delta")): _loss(r.get("rho")) for r in curve}))
    headers = ["record size Δ"] + [f"ρ: {_code(n)}" for n, _ in per_table]
    # with several currencies the total adds them at one number: say so in its header
    multi = len({m for t in tables for m in _curve_unit(t).split(" + ")}) > 1
    cols = _loss_columns(total, delta)
    headers += [f"<b>{'pessimistic ' if multi else ''}total</b> {label}" for _, label in cols]
    rows = []
    for r in base:
        d = _float(r.get("delta"))
        row: list[Any] = [r.get("delta")]
        row += [m.get(d) for _, m in per_table]
        row += [_loss(r.get(k)) for k, _ in cols]
        rows.append(row)
    why = (" Pure ε is not shown: Gaussian-type noise has no finite pure-ε guarantee, so ε is "
           "given at the release's δ." if _pure_eps_infinite(total) else "")
    what = summary.get("total_policy_curve_description")
    what = (f" The total: {html.escape(str(what))}." if what else
            " The total adds every table's loss at the same size Δ.")
    return _table(headers, rows, caption="Privacy loss of a record of size Δ (ρ per table "
                  "cell, and in total over the whole release)." + what + why)


def _rollup_additivity_note(t: Mapping[str, Any]) -> str:
    """Whether a table's published cells add up to its published rollups, in words (public).

    Rollups add the noisy cells before the publication rules, which then act on each level
    separately: rounding to a unit the estimates are not already multiples of (the table's
    grid), clamping negatives to 0 and withholding cells make the published cells differ from
    what the rollup added (review rev63p: the demo's employment table, on a grid of 0.1 and
    rounded to whole persons, published a national total 58 persons away from the sum of its
    published county cells, under a page that said nothing of it). Empty where the published
    cells add up (no such rule, or a rounding unit that divides the grid). A consistent table
    (whose spec refuses rounding and clamping level by level) can still withhold cells: its
    published levels then do not add up either (review rev63d: the note was left out for every
    consistent table, under a page saying "every parent equals the sum of its children").

    Example:
        >>> _rollup_additivity_note({"publication": {"round": 1.0},
        ...                          "grid": {"employment": 0.1}})[:60]
        ' The publication rules of this table (rounding to 1) act on '
        >>> _rollup_additivity_note({"publication": {"round": 1000.0},
        ...                          "grid": {"payroll": 10000.0}})
        ''
        >>> _rollup_additivity_note({"publication": {"suppress_cv": 0.5},
        ...                          "grid": {"x": 1.0}, "consistent": {}})[:78]
        ' The publication rules of this table (withholding cells (flag S)) act on each '
    """
    pub = t.get("publication")
    if not isinstance(pub, Mapping):
        return ""
    consistent = isinstance(t.get("consistent"), Mapping)
    g_any = t.get("grid")
    grid: Mapping[str, Any] = g_any if isinstance(g_any, Mapping) else {}
    rules = []
    rnd = pub.get("round")
    units = (dict(rnd) if isinstance(rnd, Mapping) else
             dict.fromkeys(grid or [""], rnd) if rnd not in (None, False) else {})
    moved = []
    for m, u in units.items():
        uf, g = _float(u), _float(grid.get(m)) if m in grid else None
        if uf is None or uf <= 0:
            continue
        if g is not None and g > 0 and abs(g / uf - round(g / uf)) <= 1e-9 * (g / uf):
            continue  # the grid is a multiple of the unit: rounding moves nothing
        moved.append(f"rounding to {_e(uf)}" if len(units) == 1 else
                     f"rounding {_e(m)} to {_e(uf)}")
    rules += moved
    if pub.get("negative") == "clamp":
        rules.append("negative estimates published as 0")
    if pub.get("suppress_cv") is not None:
        rules.append("withholding cells (flag S)")
    if not rules:
        return ""
    after = ("the consistent estimate made every parent the sum of its children" if consistent
             else "the rollups added the unrounded, unclamped noisy cells")
    return (f" The publication rules of this table ({', '.join(rules)}) act on each level "
            f"separately, after {after}: the published cells need not add up to a published "
            "rollup.")


def _table_section(t: Mapping[str, Any], level: Any, delta: Any,
                   sizes: Sequence[Any]) -> str:
    name = str(t.get("name", "?"))
    kind = str(t.get("kind", ""))
    measures = list(t.get("measures") or [])
    by = list(t.get("by") or [])
    out = [f'<section id="{_anchor("table", name)}" class="table-section">'
           f"<h3>Table {_code(name)}<span class=\"badge\">{_e(kind or '?')}</span></h3>"]
    # the statistic's definition from the spec (a count with a unit counts at most
    # plan.count_rows rows per unit in a cell); older summaries have none
    stat = t.get("statistic")
    what = (f"sum of {_codes(measures)}" if kind == "sum" else
            (f"count: {_e(str(stat))}" if stat else "count of rows") if kind == "count"
            else _codes(measures))
    facts = [
        ("Statistic", what),
        ("Grouped by", _codes(by, " × ") if by else "<em>nothing: one national total</em>"),
        ("Cells published", f"{_e(t.get('cells'))} (every cell of the public key set, including "
                            "empty ones" + (f"; {_e(str(t['keys']))}" if t.get("keys") else "")
                            + ")" if t.get("cells") is not None else _NONE),
        ("File", _code(t["file"]) if t.get("file") else _NONE),
        ("Guarantee", html.escape(_GUARANTEE.get(str(t.get("guarantee")),
                                                 str(t.get("guarantee") or _NONE)))),
    ]
    if t.get("null_policy") is not None:
        np_ = str(t["null_policy"])
        facts.append(("Missing values", f"{_code(np_)}: {html.escape(_NULLS.get(np_, np_))}"))
    out.append(_kv(facts))
    words = t.get("guarantee_in_words")
    if words:
        out.append("<h4>Guarantee in words</h4><ul>" + "".join(
            f"<li>{_e(str(w))}</li>" for w in words) + "</ul>")
    issues = t.get("usability_issues")
    if issues:
        out.append('<div class="callout warn" role="alert"><p><b>Warning: this table cannot '
                   "publish usable estimates as configured.</b></p><ul>" + "".join(
                       f"<li>{_e(str(i))}</li>" for i in issues) + "</ul></div>")

    mech = t.get("mechanism")
    if isinstance(mech, Mapping):
        out.append("<h4>Mechanism</h4>")
        pairs = [("Family", _code(mech.get("family"))), ("Class", _code(mech.get("class")))]
        params = mech.get("params")
        if isinstance(params, Mapping):
            pairs.append(("Parameters", _value(params)))
        for k, v in mech.items():
            if k in ("family", "class", "params"):
                continue
            shown = _code(v) if k.startswith("policy") and isinstance(v, str) else _value(v)
            pairs.append((k.replace("_", " "), shown))
        out.append(_kv(pairs))
    elif mech is not None:
        out.append("<h4>Mechanism</h4>" + _value(mech))

    cal = t.get("calibration")
    if isinstance(cal, Mapping):
        out.append("<h4>Calibration</h4><p>The mechanism's parameters were chosen by tabdp to "
                   "meet the loss targets below at the given record sizes (before looking at "
                   "the data).</p>")
        targets = cal.get("targets") or {}
        achieved = cal.get("achieved") or {}
        if isinstance(targets, Mapping) and targets:
            keys = sorted(set(targets) | (set(achieved) if isinstance(achieved, Mapping)
                                          else set()),
                          key=lambda k: (_float(k) is None, _float(k) or 0.0, str(k)))
            rows = [[_float(k) if _float(k) is not None else k, targets.get(k),
                     achieved.get(k) if isinstance(achieved, Mapping) else None] for k in keys]
            out.append(_table(["record size Δ", "target ρ", "achieved ρ"], rows))
        pairs = []
        for k, v in cal.items():
            if k in ("targets", "achieved", "notes"):
                continue
            pairs.append((k.replace("_", " "), _value(v)))
        if pairs:
            out.append(_kv(pairs))
        notes = cal.get("notes")
        if notes:
            items = notes if isinstance(notes, (list, tuple)) else [notes]
            out.append('<ul class="notes">' + "".join(f"<li>{_e(str(n))}</li>" for n in items)
                       + "</ul>")

    rules = []
    grid = t.get("grid")
    applies = (f" (applies to {html.escape(str(t['grid_applies_to']))})"
               if t.get("grid_applies_to") else "")
    if isinstance(grid, Mapping) and grid:
        rules.append(("Rounding grid", ", ".join(
            f"{_code(m)}: multiples of {_e(g)}" if _is_num(g) else
            f"{_code(m)}: " + ("not rounded" if g is None else _value(g))
            for m, g in grid.items()) + applies))
    elif grid is not None:
        rules.append(("Rounding grid", _value(grid) + applies))
    pub = t.get("publication")
    if isinstance(pub, Mapping):
        cv = pub.get("cv_flag")
        rules.append(("CV flag", f"flag C where the coefficient of variation (sd / |estimate|) "
                                 f"≥ {_e(cv)}" if cv not in (None, False) else "no CV flag"))
        sup = pub.get("suppress_cv")
        rules.append(("Suppression", f"estimates withheld (flag S) where cv ≥ {_e(sup)}; "
                      "the intervals of the published cells are unconditional: among the "
                      "cells left published, small ones (true value under about 1 sd) cover "
                      "less than the level, since they were kept for a large |estimate|"
                      if sup not in (None, False) else "no estimate is withheld"))
        neg = pub.get("negative")
        if neg is not None:
            rules.append(("Negative estimates", html.escape(_NEGATIVE.get(str(neg), str(neg)))))
        for k, v in pub.items():
            if k == "round":
                if v not in (None, False, {}):
                    rules.append(("Rounding of published values", _value(v)))
            elif k not in ("cv_flag", "suppress_cv", "negative"):
                rules.append((k.replace("_", " "), _value(v)))
    if rules:
        out.append("<h4>Publication rules</h4>" + _kv(rules))

    pc = list(t.get("policy_curve") or [])
    tpc = list(t.get("table_policy_curve") or [])
    if pc or tpc:
        out.append("<h4>Privacy loss by record size</h4>")
        base = _at_sizes(pc or tpc, sizes)
        tmap = {_float(r.get("delta")): r for r in tpc}
        cols = _loss_columns(pc or tpc, delta)
        headers = ["record size Δ"] + [f"{lab}, one measure" for _, lab in cols]
        if tpc and pc and len(measures) > 1:
            headers += [f"{lab}, all {len(measures)} measures" for _, lab in cols[:2]]
        dpc = list(t.get("table_policy_curve_with_direct_rollups") or [])
        dmap = {_float(r.get("delta")): r for r in dpc}
        with_direct = bool(dpc) and any(
            dmap.get(_float(r.get("delta")), {}).get("rho") != r.get("rho") for r in tpc)
        if with_direct:
            headers.append("ρ, with the rollups released directly")
        rows = []
        for r in base:
            d = _float(r.get("delta"))
            row: list[Any] = [r.get("delta")] + [_loss(r.get(k)) for k, _ in cols]
            if tpc and pc and len(measures) > 1:
                tr = tmap.get(d)
                row += ([_loss(tr.get("rho")), _loss(tr.get("epsilon"))] if tr is not None
                        else [None, None])
            if with_direct:
                dr = dmap.get(d)
                row.append(_loss(dr.get("rho")) if dr is not None else None)
            rows.append(row)
        out.append("<p>Loss of a record contributing Δ to one cell of this table"
                   + (" (to one measure, and to all measures of the cell)"
                      if len(measures) > 1 else "") + ". ε = ∞ means no pure-DP bound.</p>")
        out.append(_table(headers, rows))

    err = t.get("expected_error")
    if isinstance(err, Mapping) and err:
        out.append(f"<h4>Expected error</h4><p>Noise standard deviation (sd) and "
                   f"{_level_text(level)} margin of error (moe) of a cell, by its true total. "
                   "These follow from the mechanism alone, not from the data.</p>")
        grids = []
        for m, rows in err.items():
            body = [[r.get("total"), r.get("sd"), r.get("moe"), r.get("rel_moe")]
                    for r in rows or []]
            grids.append("<div>" + _table(["cell total", "sd", "moe", "moe / total"], body,
                                          caption=f"{_code(m)}") + "</div>")
        out.append('<div class="tables-grid">' + "".join(grids) + "</div>")

    fc = t.get("forecast")
    if fc:
        out.append("<h4>Forecast of flagged and negative cells</h4><p>Probability that a cell "
                   "of each true total is published with flag C (low reliability) or with a "
                   "negative estimate (flag N): the expected share of such cells among cells of "
                   "that size. Computed from the mechanism and publication rules alone, not "
                   "from the data.</p>")
        out.append(_table(["cell total", "share flagged C", "share negative N"], [
            [(_e(r.get("total")), True), (_e(_percent(r.get("p_flagged"))), True),
             (_e(_percent(r.get("p_negative"))), True)]
            for r in fc if isinstance(r, Mapping)], raw=True))

    rollups = t.get("rollups")
    if rollups:
        out.append("<h4>Rollups</h4><p>Coarser tables derived from this one by adding noisy "
                   "cells (no extra privacy loss), or released directly (accounted in the "
                   f"losses above).{_rollup_additivity_note(t)}</p>")
        rollup_rows: list[list[tuple[str, bool]]] = []
        for r in rollups:
            if not isinstance(r, Mapping):
                rollup_rows.append([(_value(r), False)] + [("", False)] * 6)
                continue
            rby = list(r.get("by") or [])
            mm = r.get("moe_method")
            if isinstance(mm, Mapping) and len(mm) > 1 and len({str(v) for v in mm.values()}) == 1:
                mm = next(iter(mm.values()))  # the same method for every measure: say it once
            moe_html = (_value(mm) if mm is not None else _NONE)
            direct = r.get("direct")
            dfile = r.get("direct_file")
            dstat = r.get("direct_statistic")
            direct_html = ("yes" + (f": {_file(dfile)}" if dfile else "")
                           + (f" ({_e(str(dstat))})" if dstat else "")) if direct else "no"
            # what the rollup's cells add up (a count with a unit: once per table cell; review
            # r52); older summaries have none
            rstat = r.get("statistic")
            rollup_rows.append([(_code(r.get("label", "")), False),
                                (_codes(rby, " × ") if rby else "<em>national total</em>", False),
                                (_e(str(rstat)) if rstat else _NONE, False),
                                (_e(r.get("cells")), True),
                                (_file(r["file"]) if r.get("file") else _NONE, False),
                                (moe_html, False), (direct_html, False)])
        out.append(_table(["rollup", "grouped by", "statistic", "cells", "file",
                           "margin-of-error method", "also released directly"], rollup_rows,
                          raw=True))

    if isinstance(t.get("consistent"), Mapping):
        out.append(_consistent_section(t["consistent"]))

    extra = {k: v for k, v in t.items() if k not in _TABLE_KEYS}
    if extra:
        out.append("<h4>Other settings</h4>" + _kv([(str(k), _value(v))
                                                      for k, v in extra.items()]))
    out.append("</section>")
    return "".join(out)


def _consistent_section(c: Mapping[str, Any]) -> str:
    """A consistent table (issue 30): measured levels, shares, expected sd per level."""
    measured = [str(x) for x in c.get("measured") or []]
    shares = c.get("shares") if isinstance(c.get("shares"), Mapping) else None
    out = ["<h4>Consistent levels</h4><p>The published levels of this table (its own file and "
           "every rollup's) are the <strong>consistent estimate</strong>: the generalized least "
           "squares combination of the levels measured directly below, in which every parent "
           "equals the sum of its children. It is post-processing of the released levels, "
           "with no extra privacy cost; each measured level is charged as listed in the "
           "losses above.</p>"]
    out.append(_table(["measured level", "share of the per-record targets"], [
        [(_code(lb), False), (_e(_percent(shares.get(lb))) if shares else
                              "the table's whole mechanism", bool(shares))]
        for lb in measured], raw=True))
    biased = c.get("biased_post_processing")
    if biased:
        out.append(f"<p><strong>{_e(biased)}.</strong></p>")
    sds = c.get("expected_sd")
    if isinstance(sds, Mapping):
        for m, rows in sds.items():
            if not rows:
                out.append(f"<p>{_code(m)}: no sd (alpha-stable noise); see the margins.</p>")
                continue
            out.append(_table(
                ["level", "cells", "expected sd (median)", "expected sd (largest)",
                 "sd as a sum of the table's cells (median)"],
                [[(_code(r.get("level")), False), (_e(r.get("cells")), True),
                  (_e(r.get("sd_median")), True), (_e(r.get("sd_max")), True),
                  (_e(r.get("rollup_sd_median")), True)]
                 for r in rows if isinstance(r, Mapping)],
                caption=f"expected sd per level of the consistent estimate: {_e(m)}", raw=True))
    return "".join(out)


def render_summary_html(summary: Mapping[str, Any]) -> str:
    """Render the public summary of a release (``summary.json``) as a self-contained page.

    Sections: header (title, name, description, tabdp version, randomness — a seeded run in a
    red warning box), what is protected, budget, the per-record loss curves of every table and in
    total (``<figure id="plot-loss">``; the (ε, δ) version ``id="plot-loss-eps"`` when the curves
    carry ``epsilon_delta``), the relative margins of error against cell totals
    (``<figure id="plot-moe">``), one section per table (mechanism and parameters, calibration,
    rounding grid, publication rules, loss by record size, expected error, rollups), the flag
    codes, the column dictionary, the file list and any other entry of ``summary``.

    Args:
        summary: The public summary dict written to ``summary.json`` by ``tabdp run``.

    Returns:
        The HTML document.

    Example:
        >>> page = render_summary_html({"release": {"name": "demo", "title": "A <b> test"},
        ...                             "unit": "row", "tables": []})
        >>> page.startswith("<!DOCTYPE html>"), "A &lt;b&gt; test" in page
        (True, True)
        >>> 'id="plot-loss"' in page and 'id="plot-moe"' in page
        True
    """
    from tabdp._figcache import public_svg

    release = summary.get("release") or {}
    version = str(summary.get("tabdp_version", ""))
    title = _release_title(release)
    tables = [t for t in (summary.get("tables") or []) if isinstance(t, Mapping)]
    unit = summary.get("unit") or "row"
    delta = release.get("delta")
    level = release.get("level")
    sizes = summary.get("record_sizes") or []
    randomness = str(summary.get("randomness") or "")
    seeded = randomness.lower().startswith("seeded")

    # -- header
    meta = [("Release", _e(release.get("name", ""))), ("tabdp", _e(version or "?")),
            ("Privacy unit", _e(unit)), ("Margins of error", f"{_level_text(level)} level")]
    if delta is not None:
        meta.append(("δ of (ε, δ) statements", _e(delta)))
    is_plan = summary.get("kind") == "plan"
    kicker = ("Release plan · computed from the spec alone, before any data is read" if is_plan
              else "Public release summary · differential privacy")
    head = ['<header class="masthead"><div class="page">'
            f'<div class="kicker">{html.escape(kicker)}</div>'
            f"<h1>{html.escape(title)}</h1>"]
    if release.get("description"):
        head.append(f"<p>{_e(str(release['description']))}</p>")
    head.append('<div class="meta">' + "".join(f"<span>{k}: <b>{v}</b></span>" for k, v in meta)
                + "</div></div></header>")

    body = ['<div class="page">']
    if is_plan:
        body.append('<div class="callout"><p><b>Release plan.</b> Computed from the release '
                    "spec alone: no data has been read and no noise drawn. It shows what the "
                    "release would protect and how accurate its tables would be, for review "
                    "before the run.</p></div>")
    # every reason a release is not for publication (a seeded run; tabdp compare's DP side,
    # `tabdp.release._staging.mark_not_for_publication`), each its own red notice
    others = [r for r in summary.get("not_for_publication_reasons") or []
              if isinstance(r, Mapping) and r.get("reason") != "seeded_test_run"]
    if seeded or (summary.get("not_for_publication") and not others):
        body.append('<div class="callout warn" role="alert"><p><b>Not for production, NOT FOR '
                    'PUBLICATION: seeded randomness.</b> The noise of this release '
                    + ("would be" if is_plan else "was") + " drawn from a fixed seed, so anyone "
                    "who learns the seed can remove it. Seeded runs are for tests only; do not "
                    "publish their tables.</p>"
                    f"<p>Randomness: {html.escape(randomness)}</p></div>")
    for r in others:
        body.append('<div class="callout warn" role="alert"><p><b>NOT FOR PUBLICATION: '
                    f'{_e(str(r.get("reason", "")).replace("_", " "))}.</b> '
                    f'{_e(str(r.get("text", "")))}</p></div>')
    if not is_plan and not seeded and not summary.get("not_for_publication"):
        body.append('<div class="callout ok"><p><b>Public document.</b> Everything on this page '
                    "is determined by the release settings, not computed from the "
                    "confidential records (the share of publishable cells is counted from the "
                    "published tables' flags); it may be published with the tables. "
                    f"Randomness: {html.escape(randomness or _NONE)}.</p></div>")

    words_html = _plain_words(summary, is_plan)
    toc = [("protected", "What is protected"),
           *([("words", "In plain words")] if words_html else []), ("budget", "Budget"),
           ("losses", "Privacy loss"), ("accuracy", "Accuracy"), ("tables", "Tables"),
           ("flags", "Flag codes"), ("columns", "Columns"), ("files", "Files")]
    body.append(_toc(toc))

    # -- what is protected
    if unit == "row":
        who = ("Each <b>row</b> of the input data is one record. The guarantees below apply to "
               "each row.")
        subject = "record"
    else:
        who = (f"The privacy unit is {_code(unit)}: all rows sharing one {_code(unit)} value "
               "form a single record (for example one establishment), and the guarantees "
               "below apply to that record as a whole, across every table of the release.")
        subject = "record"
    prot = [
        f"<p>{who}</p>",
        f"<p>Each {subject}'s privacy loss in a published cell is a public function of its "
        "contribution to that cell, and its loss over the release adds up over the cells it "
        f"contributes to. The curves below show the loss of a {subject} contributing its "
        "<b>size</b> Δ — its largest contribution to any one published cell — to one cell "
        "of a table. Small "
        f"{subject}s are strongly protected; larger ones have a larger loss that grows slowly "
        "with their size. The loss is measured as per-record zero-concentrated differential "
        "privacy (PRzCDP, written ρ): ρ = 0 means the tables reveal nothing about the record, "
        "and the larger ρ, the more they could reveal about it.</p>",
        "<p>tabdp does not clip values to limit a record's influence: a record's loss "
        "depends on its size instead. Only where the spec declares public bounds for a "
        "measure (input rules below) are values clamped into them before anything is "
        "computed; beyond those, every value is held within ±2<sup>64</sup> (about "
        "1.8 × 10<sup>19</sup>: a larger value counts as ±2<sup>64</sup>, and its loss is "
        "that of this size) and a fractional value is summed on the grid of multiples of "
        "2<sup>−24</sup> (rounded to the nearest), so that cell totals are exact. Every cell "
        "of the public list of cells is published with noise, including empty ones.</p>",
    ]
    if delta is not None:
        prot.append(f"<p>Losses are also stated as (ε, δ)-differential privacy at δ = "
                    f"{_e(delta)}: for every set of possible published tables, the probability "
                    "that the release falls in that set with the record in the data is at most "
                    "e<sup>ε</sup> times the probability without it, plus δ; and the same "
                    "holds with the roles of “with” and “without” swapped. δ is a small "
                    "additive allowance in this bound, not the probability that the loss "
                    "exceeds ε.</p>")
    pol = summary.get("input_policies")
    if isinstance(pol, Mapping) and pol:
        pairs = []
        for k, v in pol.items():
            if k == "bounds":
                if v:
                    pairs.append(("Public bounds (values clamped into them)", ", ".join(
                        f"{_code(m)} [{_e(b[0])}, {_e(b[1])}]" for m, b in v.items())))
                continue
            if k == "unit_nulls" and unit == "row":
                continue
            text = {"nulls": _NULLS, "negatives": _NEGATIVE_INPUT, "mode": _MODES,
                    "nonfinite": _NONFINITE, "unit_nulls": _UNIT_NULLS}.get(
                str(k), {}).get(str(v))
            label = {"nulls": "Missing values", "negatives": "Negative values",
                     "mode": "Mode", "nonfinite": "Infinite values",
                     "unit_nulls": "Rows without a unit id"}.get(
                str(k), str(k).replace("_", " "))
            pairs.append((label, f"{_code(v)}" + (f": {html.escape(text)}" if text else "")))
        prot.append("<h3>Input rules</h3>" + _kv(pairs))
    body.append(_section("protected", "What is protected", "".join(prot)))
    body.append(words_html)
    left_words = summary.get("left_out_in_words") or []
    life = summary.get("lifetime")
    # a lifetime ledger is an individual filter too: its sentence (from the spec alone) is
    # among the left-out words whether or not a unit was left out
    by = ("the budget" if not isinstance(life, Mapping) else "the lifetime budget"
          if summary.get("budget") is None else "the budget and the lifetime budget")
    body.append(_section("budget", "Budget", _budget_html(summary.get("budget"),
                                                          lifetime=life) + (
        f"<h3>Units left out by {by}</h3>"
        + "".join(f"<p>{_e(w.rstrip('.'))}.</p>" for w in left_words) if left_words else "")))

    # -- plot 1: loss curves
    curves: dict[str, Sequence[Mapping[str, Any]]] = {}
    for t in tables:
        c = _table_curve(t)
        if c:
            curves[str(t.get("name", "?"))] = c
    total = summary.get("total_policy_curve") or []
    if total:
        curves["total"] = total
    # one panel per unit of measure: record sizes in dollars, employees and rows never share
    # an axis, and the total is drawn per unit (losses are not added across units)
    units = {str(t.get("name", "?")): _curve_unit(t) for t in tables}
    # the public page's figures follow from the plan alone: cached on disk across runs
    loss = [_figure("plot-loss", public_svg(
        "loss_curves_svg", curves, title="Per-record privacy loss ρ by record size", units=units),
        "<b>How to read this plot.</b> Each coloured line is one table: the privacy loss ρ of "
        "a record contributing Δ to one of its cells (every measure of the cell, and the "
        "matching cell of each rollup released directly). Record sizes are in the unit of "
        "the measure (rows for counts), one panel per unit: losses in different units are "
        "never added. The thick black line, <b>total</b>, adds up the tables of a panel: the "
        "loss of a record of size Δ in that unit over those tables. Both axes are "
        "logarithmic; lower is more private. A record appearing in several cells of a table "
        "pays once per cell.")]
    eps_curves = {k: v for k, v in curves.items() if _has(v, "epsilon_delta")}
    if eps_curves:
        loss.append(_figure("plot-loss-eps", public_svg(
            "loss_curves_svg", eps_curves, title="Per-record loss as (ε, δ)-DP by record size",
            ylabel=f"ε at δ = {fmt(_float(delta)) if delta is not None else 'δ'}",
            key="epsilon_delta", units=units),
            "The same losses stated as (ε, δ)-differential privacy at the release's δ: for a "
            "record of size Δ and every set of possible published tables, the probability of "
            "that set with the record is at most e<sup>ε</sup> times its probability without "
            "the record, plus δ (and the same with the two swapped)."))
    loss.append(_policy_overview(summary, tables))
    body.append(_section("losses", "Privacy loss by record size", "".join(loss)))

    # -- plot 2: expected error
    # One series per table and measure, one panel per unit of measure (a measure's own unit,
    # rows for counts); the plot draws identical series once, their labels joined.
    moe: dict[str, Sequence[Mapping[str, Any]]] = {}
    moe_units: dict[str, str] = {}
    for t in tables:
        err = t.get("expected_error")
        if isinstance(err, Mapping):
            for m, rows in err.items():
                if rows:
                    label = f"{t.get('name', '?')}: {m}"
                    moe[label] = rows
                    moe_units[label] = "rows" if t.get("kind") == "count" else str(m)
    # the CV-flag threshold of each series, from its own table's cv_flag and the moe / sd of
    # its own mechanism at the plan's level (per planned total: a transformation's varies)
    cv_lines = cv_flag_lines(tables)
    body.append(_section("accuracy", "Expected accuracy", _figure(
        "plot-moe", public_svg(
            "moe_curves_svg", moe, title="Relative margin of error by true cell total",
            units=moe_units, cv_lines=cv_lines),
        f"<b>How to read this plot.</b> For a cell whose true total is on the horizontal axis, "
        f"the {_level_text(level)} margin of error of its published value divided by the total "
        "(0.1 means ± 10%). Larger cells are relatively more accurate. These curves follow from "
        "the mechanisms alone, not from the data." + _cv_caption(cv_lines, level))))

    # -- tables
    if tables:
        parts = [_table_section(t, level, delta, sizes) for t in tables]
        body.append(_section("tables", f"Tables ({len(tables)})", "".join(parts)))
    else:
        body.append(_section("tables", "Tables", "<p>No table was released.</p>"))

    flags = summary.get("flag_codes") or {}
    body.append(_section("flags", "Flag codes", "<p>Each published estimate carries a flag "
                         "(empty when none applies).</p>" + _table(
                             ["flag", "meaning"], [[(_code(k), False), (_e(v), False)]
                                                   for k, v in flags.items()], raw=True)
                         if flags else "<p>No flag codes.</p>"))
    cols = summary.get("columns") or {}
    body.append(_section("columns", "Column dictionary", "<p>Columns of the published table "
                         "files (<code>&lt;keys&gt;</code> stands for the table's grouping "
                         "columns; <code>measure</code> for each released measure).</p>" + _table(
                             ["column", "meaning"], [[(_code(k), False), (_e(v), False)]
                                                     for k, v in cols.items()], raw=True)
                         if cols else "<p>No column dictionary.</p>"))
    files = summary.get("files") or []
    body.append(_section("files", "Files of this release", (
        "<p>The public folder of the release holds:</p><ul class=\"files\">" + "".join(
            f"<li>{_code(f)}</li>" for f in files) + "</ul>") if files
        else "<p>No file list" + (" (a plan writes no tables)" if is_plan else "") + ".</p>"))
    extra = {k: v for k, v in summary.items() if k not in _SUMMARY_KEYS}
    if extra:
        body.append(_section("other", "Other information",
                             _kv([(str(k), _value(v)) for k, v in extra.items()])))
    what = "plan of release" if is_plan else "public summary of release"
    body.append(f"<footer>Generated by tabdp {_e(version or '?')} · {what} "
                f"{_code(release.get('name', ''))}. This page loads nothing from the network."
                "</footer></div>")
    return _page(f"{title} — {'release plan' if is_plan else 'release summary'}", version,
                 "".join(head) + "".join(body))


def _plain_words(summary: Mapping[str, Any], is_plan: bool) -> str:
    """The guarantee, the usable share and configuration warnings in plain words."""
    parts = []
    words = summary.get("guarantee_in_words") or []
    if words:
        parts.append("<p>What a record of a given size can lose, over every table of this "
                     "release together (the loss curves below give every size):</p><ul>"
                     + "".join(f"<li>{_e(str(w))}</li>" for w in words) + "</ul>")
    life = summary.get("lifetime")
    life_words = life.get("guarantee_in_words") if isinstance(life, Mapping) else None
    if life_words:  # [ledger]: from the spec and the public curves only
        parts.append('<div id="lifetime"><p>Over the releases of the series (a lifetime '
                     "budget, enforced across runs):</p><ul>"
                     + "".join(f"<li>{_e(str(w))}</li>" for w in (
                         [life_words] if isinstance(life_words, str) else life_words))
                     + "</ul></div>")
    usable = summary.get("publishable_in_words") or []
    if usable:
        # the only part of the page computed from the published (noisy) tables: one block
        parts.append('<div id="publishable"><p>Share of publishable cells, counted from the '
                     "flags of the published tables (a cell is publishable when it carries "
                     "none of the flags C, S or X):</p><ul>"
                     + "".join(f"<li>{_e(str(w))}</li>" for w in usable) + "</ul></div>")
    elif is_plan and summary.get("tables"):
        parts.append("<p>The forecast share of flagged and negative cells, by cell size, is in "
                     "each table's section below.</p>")
    issues = summary.get("usability_issues") or []
    if issues:
        parts.append('<div class="callout warn" role="alert"><p><b>Warning: configuration '
                     "problems.</b> These settings cannot give usable estimates:</p><ul>"
                     + "".join(f"<li>{_code(i.get('path', ''))}: {_e(str(i.get('message', '')))}"
                               "</li>" if isinstance(i, Mapping) else f"<li>{_e(str(i))}</li>"
                               for i in issues) + "</ul></div>")
    if not parts:
        return ""
    return _section("words", "In plain words", "".join(parts))


def cv_flag_lines(tables: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, float]]]:
    """Where each expected-error series reaches its table's CV flag threshold (public).

    A cell is flagged C where ``sd / estimate >= cv_flag``; at a true total T that is
    ``moe(T) / T >= cv_flag * moe(T) / sd(T)``, with the moe and sd the plan computes for the
    table's own mechanism at the release's level (``expected_error`` rows): ``cv_flag * z`` for
    Gaussian noise, another multiple for other noise laws, and a value per planned total where
    the ratio varies (transformation mechanisms). Tables without a CV flag have no line.

    Args:
        tables: The summary's tables (``publication.cv_flag`` and ``expected_error`` read).

    Returns:
        Series label (``"<table>: <measure>"``, as plotted) → rows ``{"total", "rel_moe",
        "cv_flag", "moe_per_sd"}`` (``rel_moe`` is the threshold on the plot's y axis).

    Example:
        >>> rows = [{"total": 10.0, "sd": 2.0, "moe": 3.0}]
        >>> cv_flag_lines([{"name": "n", "publication": {"cv_flag": 0.3},
        ...                 "expected_error": {"count": rows}}])["n: count"][0]["rel_moe"]
        0.45
    """
    out: dict[str, list[dict[str, float]]] = {}
    for t in tables:
        pub = t.get("publication")
        flag = pub.get("cv_flag") if isinstance(pub, Mapping) else None
        cv = None if flag is True or isinstance(flag, bool) else _float(flag)
        err = t.get("expected_error")
        if cv is None or cv <= 0 or not isinstance(err, Mapping):
            continue
        for m, rows in err.items():
            pts = []
            for r in rows or []:
                total, sd, moe = _float(r.get("total")), _float(r.get("sd")), _float(r.get("moe"))
                if total is None or total <= 0 or not sd or sd <= 0 or moe is None or moe <= 0:
                    continue
                ratio = moe / sd
                pts.append({"total": total, "rel_moe": cv * ratio, "cv_flag": cv,
                            "moe_per_sd": ratio})
            if pts:
                out[f"{t.get('name', '?')}: {m}"] = pts
    return out


def _cv_caption(lines: Mapping[str, Sequence[Mapping[str, float]]], level: Any) -> str:
    """The caption's sentence on the CV-flag lines, from `cv_flag_lines`."""
    if not lines:
        return ""
    parts = []
    for label, pts in lines.items():
        ys = [p["rel_moe"] for p in pts]
        cv = pts[0]["cv_flag"]
        lo, hi = min(ys), max(ys)
        if math.isclose(lo, hi, rel_tol=1e-6):
            parts.append(f"{_e(label)}: {fmt(lo)} (cv flag {fmt(cv)} × moe / sd "
                         f"{fmt(pts[0]['moe_per_sd'])})")
        else:
            parts.append(f"{_e(label)}: from {fmt(lo)} to {fmt(hi)} across the planned totals "
                         f"(cv flag {fmt(cv)} × moe / sd of its noise there)")
    return (" A dashed line marks where a series' coefficient of variation (sd / estimate) "
            "reaches its table's CV flag threshold, for a cell published at its true total: "
            "moe / total = cv flag × the moe / sd of that table's mechanism at the "
            f"{_level_text(level)} level (the normal quantile for Gaussian noise, e.g. 1.645 at "
            "90%; other values for other noise laws; drawn per planned total where it varies). "
            "Cells above it are "
            "flagged C. Thresholds: " + "; ".join(parts) + ".")


# -- confidential report --------------------------------------------------------------------------
_BANNER_TEXT = "CONFIDENTIAL — contains values derived from individual records; do not publish"


def _as_polars(frame: Any) -> pl.DataFrame:
    if frame is None:
        return pl.DataFrame()
    if isinstance(frame, pl.DataFrame):
        return frame
    if isinstance(frame, pl.LazyFrame):
        return frame.collect()
    try:
        return pl.from_pandas(frame)
    except (TypeError, ValueError, ImportError):
        return pl.DataFrame(frame)


def _col(df: pl.DataFrame, name: str) -> np.ndarray:
    if name not in df.columns:
        return np.zeros(0)
    return df[name].cast(pl.Float64, strict=False).to_numpy().astype(np.float64)


def _max(v: np.ndarray) -> float | None:
    v = v[~np.isnan(v)]
    return float(v.max()) if v.size else None


def _frame_table(df: pl.DataFrame, *, caption: str | None = None,
                 percent: Sequence[str] = ()) -> str:
    # break opportunities after "_" keep long column names (rho_<query>) from widening the table
    headers = [f"<code>{_e(c).replace('_', '_<wbr>')}</code>" for c in df.columns]
    pct = [c in percent for c in df.columns]
    rows = [[(_e(_percent(v)), True) if p else (_e(_cell(v)), _is_num(v) or v is None)
             for v, p in zip(r, pct, strict=True)] for r in df.iter_rows()]
    return _table(headers, rows, caption=caption, raw=True)


def _left_out_html(left_out: Mapping[str, Mapping[str, Any]], limit: Any,
                   key: Any = None) -> str:
    """CONFIDENTIAL: per table, the units, rows and share of each measure the filter left out."""
    measures = sorted({m for v in left_out.values() for m in (v.get("measures") or {})})
    rows = []
    for name, v in left_out.items():
        ms = v.get("measures") or {}
        rows.append({"table": name, "units_left_out": v.get("units"),
                     "rows_left_out": v.get("rows"), "share_of_rows": v.get("rows_share"),
                     **{f"share_of_{m}": (ms[m]["share"] if m in ms else None)
                        for m in measures}})
    pct = ("share_of_rows", *[f"share_of_{m}" for m in measures])
    table = _frame_table(pl.DataFrame(rows, strict=False), percent=pct) if rows else \
        "<p>No tables.</p>"
    lim = ("" if limit is None else
           f" The spec allows at most {_e(_percent(limit))} "
           f"(<code>{_e(key or 'budget.max_left_out')}</code>) "
           "of a table's rows or of any measure to be left out; a run above it fails.")
    any_left = any(v.get("units") for v in left_out.values())
    head = ('<div class="callout warn"><p><b>The budget left units out.</b> Their rows and '
            "values are missing from the published cells, so the totals there are off by "
            "the amounts below (a bias, downward for counts and for sums of non-negative "
            "values); the published sd and moe do not include this bias.</p></div>"
            if any_left else "")
    return (head + "<p>A unit whose loss would pass its budget is left out of a query (the "
            "individual filter): the query runs without it. Per table: the units and rows left "
            "out and the share of each measure they held (exact sums over the rows in released "
            "cells; counts: the share of rows)." + lim + "</p>" + table)


def _percent(v: Any) -> str:
    f = _float(v)
    if f is None:
        return _NONE
    return f"{f:.1%}" if math.isfinite(f) else fmt(f)


def _cell(v: Any) -> Any:
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v, default=str)
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return str(v)


_ROW = "__tabdp_row__"
_QUANTILES = (0.5, 0.9, 0.99, 0.999)
#: Largest number of points of the ρ-against-size plot (``scatter_svg``'s default).
_SCATTER_POINTS = 20000


@dataclass
class LossStatistics:
    """CONFIDENTIAL: what the confidential report shows of the per-record frame.

    Computed by `loss_statistics` (from a frame, or with bounded memory from a LazyFrame) and
    shown by `render_confidential_html`; `rho_summary` gives the loss statistics of the
    release's ``confidential.json``.
    """

    height: int
    n: int  # values of rho (0 without a rho column)
    max_rho: float | None
    quantiles: np.ndarray | None
    zeros: int
    n_inf: int
    has_eps: bool
    max_eps: float | None
    has_epsd: bool
    max_epsd: float | None
    has_size: bool
    max_size: float | None
    share: tuple[float | None, int, int] | None  # largest share, near, over
    hist: tuple[np.ndarray | None, np.ndarray | None, int]  # edges, counts, left out
    # x, y, and for a sample (units it was drawn from, largest kept, step)
    scatter: tuple[np.ndarray, np.ndarray, tuple[int, int, int] | None] | None
    top: pl.DataFrame | None


    def rho_summary(self) -> dict[str, Any]:
        """CONFIDENTIAL: ``units``, ``rho_max`` and ``rho_q<q>`` (q = 0.5, 0.9, 0.99, 0.999).

        The statistics ``Report.confidential_summary`` gives of the same per-record losses.

        Returns:
            The dictionary (no quantiles without units).

        Example:
            >>> per = pl.DataFrame({"row": [0, 1], "rho": [0.5, 2.0], "size": [1.0, 9.0]})
            >>> loss_statistics(per).rho_summary()["rho_q0.5"]
            1.25
        """
        out: dict[str, Any] = {"units": self.height, "rho_max": self.max_rho if self.height
                               else None}
        if self.height and self.quantiles is not None:
            out |= {f"rho_q{q}": float(v) for q, v in zip(_QUANTILES, self.quantiles,
                                                          strict=True)}
        return out


def loss_statistics(per_record: Any, budget: Any = None, top_n: int = 20) -> LossStatistics:
    """CONFIDENTIAL statistics of a per-record report, as the confidential page shows them.

    Computed once, they can be given to `render_confidential_html` (``report["losses"]``) and
    their `LossStatistics.rho_summary` written to ``confidential.json``, so that a large
    report is read once for both.

    Args:
        per_record: The per-record frame (Polars, pandas), a ``pl.LazyFrame`` (e.g. a scan
            of ``per_record_losses.parquet``: read batch by batch, memory independent of its
            number of rows) or the path of a Parquet file (such as
            ``per_record_losses.parquet``): read in slices of the row groups a streaming
            release writes (`tabdp.privacy.ledger.PER_RECORD_ROW_GROUP` rows), each decoded
            once and freed before the next (a ``LazyFrame``'s batches come from Polars'
            streaming engine, which decodes several row groups ahead of the reader).
        budget: The budget as the page takes it (``summary["budget"]``, a number, or None).
        top_n: Number of most exposed units kept.

    Returns:
        The statistics.

    Example:
        >>> per = pl.DataFrame({"row": [0, 1], "rho": [0.5, 2.0], "size": [1.0, 9.0]})
        >>> loss_statistics(per).max_rho
        2.0
    """
    if isinstance(top_n, bool) or not isinstance(top_n, (int, np.integer)) or top_n < 0:
        raise InvalidParameterError(
            f"loss_statistics: top_n must be a whole number >= 0; got {top_n!r}.\nHint: e.g. "
            "top_n=20 (0: no rows of the most exposed units).")
    bud = _budget_object(budget)
    if isinstance(per_record, (str, os.PathLike)):
        return _losses_lazy(pl.scan_parquet(os.fspath(per_record)), bud, top_n,
                            PER_RECORD_ROW_GROUP)
    if isinstance(per_record, pl.LazyFrame):
        return _losses_lazy(per_record, bud, top_n)
    return _losses_eager(_as_polars(per_record), bud, top_n)


def _rho_quantiles(rho: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        qs = np.quantile(rho, list(_QUANTILES))
    return np.asarray(qs, dtype=np.float64)


def _losses_eager(per: pl.DataFrame, bud: Budget | None, top_n: int) -> LossStatistics:
    rho = _col(per, "rho")
    eps = _col(per, "epsilon")
    size = _col(per, "size")
    epsd = _col(per, "epsilon_delta") if "epsilon_delta" in per.columns else None
    qs = None
    if rho.size:
        qs = _rho_quantiles(rho)
        qs = np.where(np.isnan(qs) & np.any(np.isinf(rho)), np.inf, qs)
    share = None
    if bud is not None and rho.size:
        limit = bud.limit(size if size.size == rho.size else np.ones(rho.size))
        with np.errstate(divide="ignore", invalid="ignore"):
            sh = np.where(limit > 0, rho / limit, np.inf)
        share = (_max(sh), int(np.sum(sh >= 0.9)), int(np.sum(~(sh <= 1.0 + 1e-12))))
    finite = rho[np.isfinite(rho)]
    shown = finite[finite > 0]
    edges = counts = None
    if shown.size:
        edges = histogram_edges(int(shown.size), float(shown.min()), float(shown.max()))
        counts = np.bincount(histogram_bin_index(shown, edges), minlength=edges.size - 1)
    top = None
    if per.height and "rho" in per.columns:
        top = per.sort("rho", descending=True, nulls_last=True, maintain_order=True).head(top_n)
    return LossStatistics(
        height=per.height, n=int(rho.size), max_rho=_max(rho), quantiles=qs,
        zeros=int(np.sum(rho == 0)), n_inf=int(np.sum(np.isinf(rho))),
        has_eps=bool(eps.size), max_eps=_max(eps), has_epsd=epsd is not None,
        max_epsd=_max(epsd) if epsd is not None and epsd.size else None,
        has_size=bool(size.size), max_size=_max(size), share=share,
        hist=(edges, counts, int(rho.size - shown.size)),
        scatter=(size, rho, None) if size.size == rho.size else None, top=top)


def _f64(name: str) -> pl.Expr:
    """A column as ``_col`` reads it: Float64, unparseable values and nulls as NaN."""
    return pl.col(name).cast(pl.Float64, strict=False).fill_null(float("nan"))


def _nan_max(e: pl.Expr) -> pl.Expr:
    # when/then, not filter: a filter inside an aggregation branches the streaming plan, and
    # the branches' buffers can grow with the number of rows
    return pl.when(~e.is_nan()).then(e).max()


def _losses_lazy(lf: pl.LazyFrame, bud: Budget | None, top_n: int,
                 slice_rows: int | None = None) -> LossStatistics:
    """`_losses_eager` with streaming queries: memory independent of the number of rows.

    Every query runs with ``collect(engine="streaming")`` and returns a bounded result: one row
    of totals, the histogram's bin counts, the order statistics of the quantiles
    (`exact_quantiles`), at most ``_SCATTER_POINTS`` points, and ``top_n`` rows.
    ``slice_rows``: read the Parquet file ``lf`` scans in slices of that many rows (`_batches`).
    """
    fast = _losses_batched(lf, bud, top_n, slice_rows)
    if fast is not None:
        return fast
    cols = lf.collect_schema().names()
    has_rho, has_size = "rho" in cols, "size" in cols
    rho, size = _f64("rho"), _f64("size")
    # one linear pipeline: scan -> per-row columns (the budget limit once) -> one reduction
    per_row: dict[str, pl.Expr] = {c: _f64(c) for c in ("rho", "epsilon", "epsilon_delta",
                                                        "size") if c in cols}
    if bud is not None and has_rho:
        if has_size:
            per_row["_limit"] = size.map_batches(_on_engine(bud.limit),
                                                 return_dtype=pl.Float64, is_elementwise=True)
        else:
            per_row["_limit"] = pl.lit(float(bud.limit(np.ones(1))[0]), pl.Float64)
    r, sz = pl.col("rho"), pl.col("size")
    shown = rho.is_finite() & (rho > 0)
    ok = shown & size.is_finite() & (size > 0)
    r_shown = r.is_finite() & (r > 0)
    aggs: dict[str, pl.Expr] = {"height": pl.len()}
    if has_rho:
        aggs |= {"max_rho": _nan_max(r), "zeros": (r == 0).sum(),
                 "n_inf": r.is_infinite().sum(), "shown": r_shown.sum(),
                 "lo": pl.when(r_shown).then(r).min(), "hi": pl.when(r_shown).then(r).max()}
        if has_size:
            aggs["ok"] = (r_shown & sz.is_finite() & (sz > 0)).sum()
    for key, name in (("max_eps", "epsilon"), ("max_epsd", "epsilon_delta"),
                      ("max_size", "size")):
        if name in cols:
            aggs[key] = _nan_max(pl.col(name))
    if "_limit" in per_row:
        limit = pl.col("_limit")
        # Polars orders NaN above every number: compare only non-NaN values, as numpy does
        sh = pl.when(~limit.is_nan() & (limit > 0)).then(r / limit).otherwise(float("inf"))
        aggs |= {"share_max": _nan_max(sh), "near": (~sh.is_nan() & (sh >= 0.9)).sum(),
                 "over": (sh.is_nan() | (sh > 1.0 + 1e-12)).sum()}
    row = lf.with_columns(**per_row).select(**aggs).collect(engine="streaming").row(
        0, named=True)
    height = int(row["height"])
    n = height if has_rho else 0
    qs = None
    if n:
        qs = exact_quantiles(lf, "rho", _QUANTILES)
        qs = np.where(np.isnan(qs) & (int(row["n_inf"]) > 0), np.inf, qs)
    share = None
    if "share_max" in row and n:
        share = (_opt_float(row["share_max"]), int(row["near"]), int(row["over"]))
    n_shown = int(row.get("shown") or 0)
    edges = counts = None
    if n_shown:
        edges = histogram_edges(n_shown, float(row["lo"]), float(row["hi"]))
        e = edges
        bins = (lf.select(rho).filter(shown)
                .select(b=rho.map_batches(
                    _on_engine(lambda v: histogram_bin_index(v, e)),
                    return_dtype=pl.Int64, is_elementwise=True))
                .group_by("b").agg(c=pl.len()).collect(engine="streaming"))
        counts = np.zeros(edges.size - 1, dtype=np.int64)
        b, c = bins["b"].to_numpy(), bins["c"].to_numpy()
        counts[b[b >= 0]] = c[b >= 0]
    scatter = None
    if has_rho == has_size or height == 0:
        scatter = _scatter_points(lf, ok, int(row.get("ok") or 0), top_n) \
            if has_rho and has_size else (np.zeros(0), np.zeros(0), None)
    top = None
    if height and has_rho:
        top = _top_rows(lf, "rho", top_n)
    return LossStatistics(
        height=height, n=n, max_rho=_opt_float(row.get("max_rho")), quantiles=qs,
        zeros=int(row.get("zeros") or 0), n_inf=int(row.get("n_inf") or 0),
        has_eps="epsilon" in cols and height > 0, max_eps=_opt_float(row.get("max_eps")),
        has_epsd="epsilon_delta" in cols,
        max_epsd=_opt_float(row.get("max_epsd")) if height else None,
        has_size=has_size and height > 0, max_size=_opt_float(row.get("max_size")),
        share=share, hist=(edges, counts, n - n_shown), scatter=scatter, top=top)


def _on_engine(fn: Callable[[np.ndarray], Any]) -> Callable[[pl.Series], pl.Series]:
    """A batch function applying ``fn`` to a column's values, on Polars' threads.

    Polars runs it on its own threads, which start with NumPy's default error state: the body
    runs inside `tabdp._numeric.engine_thread` (errors ignored, as on the caller's thread; no
    thread pools of tabdp's own), so no warning there depends on a value of the column.

    Example:
        >>> f = _on_engine(lambda v: np.log(v))
        >>> f(pl.Series([0.0, 1.0])).to_list()
        [-inf, 0.0]
    """
    def run(s: pl.Series) -> pl.Series:
        with engine_thread():
            return pl.Series(fn(s.to_numpy()))

    return run


def _top_rows(lf: pl.LazyFrame, col: str, k: int) -> pl.DataFrame:
    """``df.sort(col, descending=True, nulls_last=True, maintain_order=True).head(k)``, streamed.

    The k-th largest value ``t`` first (values only), then the rows above ``t``, the first rows
    equal to ``t`` and, if short, the first null rows: never more than ``k`` rows in memory.
    """
    if k <= 0:
        return lf.head(0).collect()
    vals = (lf.select(pl.col(col).drop_nulls().top_k(k)).collect(engine="streaming")
            .sort(col, descending=True))[col]
    parts = []
    if vals.len():
        t = vals[-1]
        above = lf.filter(pl.col(col) > t).collect(engine="streaming")
        parts += [above, lf.filter(pl.col(col) == t).head(k - above.height)
                  .collect(engine="streaming")]
    if vals.len() < k:
        parts.append(lf.filter(pl.col(col).is_null()).head(k - vals.len())
                     .collect(engine="streaming"))
    out = pl.concat(parts, how="vertical_relaxed") if len(parts) > 1 else parts[0]
    return out.sort(col, descending=True, nulls_last=True, maintain_order=True).head(k)


def _nan_max_np(v: np.ndarray) -> float | None:
    """The largest non-NaN value (``_nan_max``), None when there is none."""
    if v.size:
        m = v.max()  # without NaN (nor a largest value of 0.0, -0.0 or both): that of the copy
        if not np.isnan(m) and m != 0:
            return float(m)
    v = v[~np.isnan(v)]
    return float(v.max()) if v.size else None


def _max_opt(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def _best(y: np.ndarray, i: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest ``y``, ties to the smallest ``i`` (``top_k`` by (y, -i))."""
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if y.size > k:
        t = np.partition(y, y.size - k)[y.size - k]
        pos = np.flatnonzero(y >= t)
    else:
        pos = np.arange(y.size)
    return pos[np.lexsort((i[pos], -y[pos]))[:k]]


def _above_kth(y: np.ndarray, kept: np.ndarray, k: int) -> np.ndarray:
    """Which of ``y`` may enter the ``k`` largest of ``kept`` (values of earlier positions).

    With ``k`` values kept, a new value enters `_best`'s top ``k`` only if it is above the
    least of them: an equal one loses the tie to every kept value (ties go to the smallest
    position, and the kept values' positions come first). With fewer kept: every value.

    Example:
        >>> _above_kth(np.array([1.0, 3.0, 2.0]), np.array([2.0, 5.0]), 2).tolist()
        [False, True, False]
        >>> _above_kth(np.array([1.0]), np.array([2.0]), 2).tolist()
        [True]
    """
    if kept.size < k or not kept.size:
        return np.ones(y.size, dtype=bool)
    return y > kept.min()


class _BinCounts:
    """`histogram_bin_index`'s bin counts of positive values, from buckets of their bits.

    The values to count lie in ``[lo, hi]`` (positive, finite): their bits, read as integers,
    are ordered as they are, so a bucket of consecutive bit patterns (at most 2¹⁶ buckets
    between ``lo`` and ``hi``) holds an interval of values. A bin index does not decrease with
    the value inside the edges, so where both ends of a bucket fall in the same bin every value
    of it does: such buckets are counted by their number of values, and only the values of the
    few buckets with an edge inside (or outside the edges) get their bin one by one. The counts
    are those of `histogram_bin_index`, whatever the edges.

    Example:
        >>> e = np.array([1.0, 2.0, 4.0])
        >>> c = _BinCounts(e, 1.0, 4.0)
        >>> c.add(np.array([1.0, 1.5, 2.0, 3.9, 4.0]))
        >>> c.counts().tolist()
        [2, 3]
    """

    def __init__(self, edges: np.ndarray, lo: float, hi: float) -> None:
        """Buckets of the bit patterns from ``lo`` to ``hi`` (positive, finite, lo <= hi)."""
        self.edges = np.asarray(edges, dtype=np.float64)
        self.base = int(np.float64(lo).view(np.int64))
        top = int(np.float64(hi).view(np.int64))
        self.shift = max(0, (top - self.base).bit_length() - 16)
        start = self.base + (np.arange(((top - self.base) >> self.shift) + 1, dtype=np.int64)
                             << self.shift)
        end = np.minimum(start + ((1 << self.shift) - 1), top)
        b0 = histogram_bin_index(start.view(np.float64), self.edges)
        b1 = histogram_bin_index(end.view(np.float64), self.edges)
        #: per bucket: the bin of all its values, or -1 (values binned one by one)
        self.bin = np.where((b0 == b1) & (b0 >= 0), b0, -1)
        self.mixed = self.bin < 0  # (a small table: its look-ups stay in the cache)
        self.in_bucket = np.zeros(start.size, dtype=np.int64)
        self.exact = np.zeros(self.edges.size - 1, dtype=np.int64)

    def add(self, v: np.ndarray) -> None:
        """Count values (positive, finite, within ``[lo, hi]``)."""
        v = np.ascontiguousarray(v, dtype=np.float64)
        b = (v.view(np.int64) - self.base) >> self.shift
        self.in_bucket += np.bincount(b, minlength=self.bin.size)
        mixed = self.mixed[b]
        if mixed.any():
            idx = histogram_bin_index(v[mixed], self.edges)
            self.exact += np.bincount(idx[idx >= 0], minlength=self.exact.size)

    def counts(self) -> np.ndarray:
        """The bin counts of the values added."""
        out = self.exact.copy()
        whole = self.bin >= 0
        np.add.at(out, self.bin[whole], self.in_bucket[whole])
        return out


class _Shares:
    """The budget shares ρ / limit(size): their largest value and counts >= 0.9 and > 1 + 1e-12.

    Fed batch by batch. A curve's limit is costly (a logarithm and an interpolation per unit):
    it is evaluated only for the units whose share may matter. A curve does not decrease with
    size, so the limit at the smallest size of a bucket of sizes (the first 16 bits of its
    absolute value: sign, exponent and 4 bits of mantissa), lowered by 1e-6 (far beyond the
    rounding of the logarithm and the interpolation), is at most the limit of every size in it:
    ρ divided by it bounds the share from above. A unit whose bound is below both the largest
    share found so far and 0.9 changes neither the largest share nor the counts; the others'
    shares are computed as before (the same limits, unit by unit). The first batch, a constant
    budget and a largest share not yet positive: every unit's share.

    Example:
        >>> sh = _Shares(Budget({1.0: 0.5, 100.0: 2.0}))
        >>> sh.add(np.array([0.1, 0.45, 3.0]), np.array([1.0, 1.0, 1e4]))
        >>> sh.result()
        (1.5, 2, 1)
    """

    def __init__(self, bud: Budget) -> None:
        """No units yet."""
        self.bud = bud
        self.max: float | None = None
        self.near = self.over = 0
        self.floor: np.ndarray | None = None  # made at the second batch

    def add(self, r: np.ndarray, s: np.ndarray) -> None:
        """Add units' ρ and sizes."""
        if self.bud.constant is None and self.max is not None and self.max > 0:
            if self.floor is None:
                lo = (np.arange(1 << 15, dtype=np.int64) << 48).view(np.float64)
                lim = np.asarray(self.bud.limit(np.where(np.isnan(lo), 0.0, lo)),
                                 dtype=np.float64)
                # (NaN sizes: NaN bound, so their units are always computed)
                self.floor = np.where(np.isnan(lo), np.nan, lim * (1 - 1e-6))
            key = np.abs(s).view(np.int64) >> 48
            with np.errstate(divide="ignore", invalid="ignore"):
                maybe = ~(r / self.floor[key] < min(self.max, 0.9))
            r, s = r[maybe], s[maybe]
        limit = np.asarray(self.bud.limit(s), dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            sh = np.where(~np.isnan(limit) & (limit > 0), r / limit, np.inf)
        self.max = _max_opt(self.max, _nan_max_np(sh))
        self.near += int(np.count_nonzero(~np.isnan(sh) & (sh >= 0.9)))
        self.over += int(np.count_nonzero(np.isnan(sh) | (sh > 1.0 + 1e-12)))

    def result(self) -> tuple[float | None, int, int]:
        """The largest share, the number >= 0.9 and the number over 1 (+ 1e-12)."""
        return self.max, self.near, self.over


#: Rows per slice where Polars has no ``LazyFrame.collect_batches`` (before 1.34).
_SLICE_ROWS = 1_000_000


def _batches(lf: pl.LazyFrame, slice_rows: int | None = None) -> Any:
    """The frame's rows in bounded batches, in order (``collect_batches`` where Polars has it).

    With ``slice_rows`` (``lf`` a query over a scan of one Parquet file whose row groups hold
    that many rows, such as a streaming release's per-record report: `PER_RECORD_ROW_GROUP`):
    consecutive slices of that many rows, each collected by the streaming engine, which reads
    only the row groups under the slice and frees them before the next (``collect_batches``
    decodes several ahead: at 10M rows about 120 MB against 45). A file of other row groups
    gives the same rows (a row group across two slices is decoded for each). Older Polars:
    consecutive slices of `_SLICE_ROWS` rows (a scan of Parquet skips the row groups before
    the slice).
    """
    if slice_rows is not None:
        yield from _slices_from(lf, 0, slice_rows)
        return
    if hasattr(pl.LazyFrame, "collect_batches"):
        yield from lf.collect_batches()
        return
    yield from _slices_from(lf, 0, _SLICE_ROWS)


def _slices_from(lf: pl.LazyFrame, off: int, rows: int) -> Any:
    """The frame's rows from row ``off`` on, in slices of ``rows`` rows (streaming engine)."""
    while True:
        b = lf.slice(off, rows).collect(engine="streaming")
        if b.height:
            yield b
        if b.height < rows:
            return
        off += rows


def _losses_batched(lf: pl.LazyFrame, bud: Budget | None, top_n: int,
                    slice_rows: int | None = None) -> LossStatistics | None:
    """`_losses_lazy` in two reads of the loss columns (rarely three or four for the quantiles).

    One streaming read of ``rho``, ``size``, ``epsilon`` and ``epsilon_delta``, batch by batch,
    gives the totals, maxima, budget shares (`_Shares`), the first narrowing of the quantiles'
    `BatchedOrderStatistics`, the ``top_n`` largest ρ and the scatter plot's largest points;
    a second read of ``rho`` and ``size`` the histogram (`_BinCounts`), the scatter plot's
    systematic sample and the quantiles' next narrowing, which collects their bins of up to
    4 x ``COLLECT_CAP`` values (a third or fourth read of ``rho`` only for a larger bin); then the
    ``top_n`` rows, read by their positions (the rows of the stable sort by ρ). Memory: a
    batch, the ``_SCATTER_POINTS`` points and the quantiles' bins, and for a report of at most
    `_KEEP_ROWS` rows its ``rho`` and ``size`` columns: the passes after the first then use
    them instead of reading the file again (the same values in the same order). The same figures as
    `_losses_lazy`'s queries, which remain for a frame this path does not take (no rows, a
    column missing or not Float64, a NaN or null ρ or size): None then.
    """
    schema = lf.collect_schema()
    cols = schema.names()
    if schema.get("rho") != pl.Float64 or schema.get("size") != pl.Float64:
        return None
    extra = [c for c in ("epsilon", "epsilon_delta") if c in cols]
    k_top = max(_SCATTER_POINTS // 10, top_n)
    # (bins of up to 4 x COLLECT_CAP values collected: the quantiles mostly in two passes)
    ranks_of = BatchedOrderStatistics(cap=4 * _streaming.COLLECT_CAP)
    shares = _Shares(bud) if bud is not None else None
    height = zeros = n_inf = n_shown = n_ok = 0
    lo, hi = math.inf, -math.inf
    maxes: dict[str, float | None] = {"rho": None, "size": None, "epsilon": None,
                                      "epsilon_delta": None}
    top = (np.zeros(0), np.zeros(0, np.int64))  # the top_n largest ρ, their rows
    best = (np.zeros(0), np.zeros(0), np.zeros(0, np.int64))  # y, x, ok index
    every: list[tuple[np.ndarray, np.ndarray]] | None = []  # all ok points while few
    # the ρ and size columns of a report of at most `_KEEP_ROWS` rows, for the later passes
    # (the same values in the same order as a new read of the file, which they then replace)
    kept: list[tuple[np.ndarray, np.ndarray]] | None = []
    for b in _batches(lf.select(*[_f64(c).alias(c) for c in ("rho", "size", *extra)]),
                        slice_rows):
        r, s = b["rho"].to_numpy(), b["size"].to_numpy()
        if np.isnan(r).any() or np.isnan(s).any():
            return None
        if not r.size:
            continue
        height += r.size
        if kept is not None and height <= _KEEP_ROWS:
            kept.append((r, s))
        else:
            kept = None
        maxes["rho"] = _max_opt(maxes["rho"], float(r.max()))
        maxes["size"] = _max_opt(maxes["size"], float(s.max()))
        for c in extra:
            maxes[c] = _max_opt(maxes[c], _nan_max_np(b[c].to_numpy()))
        zeros += int(np.count_nonzero(r == 0))
        n_inf += int(np.count_nonzero(np.isinf(r)))
        shown = np.isfinite(r) & (r > 0)
        if shown.any():
            n_shown += int(np.count_nonzero(shown))
            rs = r[shown]
            lo, hi = min(lo, float(rs.min())), max(hi, float(rs.max()))
        if shares is not None:
            shares.add(r, s)
        # a value below the k-th largest so far cannot enter the top k, nor can an equal one
        # (its row comes after every kept row: ties go to the earlier row), so only the
        # values above it are added (the same top k as adding them all)
        at = np.arange(height - r.size, height, dtype=np.int64)
        new = _above_kth(r, top[0], top_n)
        tv, tp = (np.concatenate([top[0], r[new]]), np.concatenate([top[1], at[new]]))
        keep = _best(tv, tp, top_n)
        top = (tv[keep], tp[keep])
        ranks_of.feed(sortable_keys(r))
        ok = shown & np.isfinite(s) & (s > 0)
        y, x = r[ok], s[ok]
        idx = np.arange(n_ok, n_ok + y.size, dtype=np.int64)
        n_ok += y.size
        new = _above_kth(y, best[0], k_top)  # as the top rows above: the same k_top points
        ys, xs, ids = (np.concatenate([best[0], y[new]]), np.concatenate([best[1], x[new]]),
                       np.concatenate([best[2], idx[new]]))
        keep = _best(ys, ids, k_top)
        best = (ys[keep], xs[keep], ids[keep])
        if every is not None:
            every = every + [(x, y)] if n_ok <= _SCATTER_POINTS else None
    if not height:
        return None
    ranks, finish = quantile_ranks(height, _QUANTILES)
    more = ranks_of.end_pass(ranks)
    edges = counts = None
    binned = None
    if n_shown:
        edges = histogram_edges(n_shown, lo, hi)
        binned = _BinCounts(edges, lo, hi)
    step = -(-n_ok // max(_SCATTER_POINTS - k_top, 1))
    spread: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    first = True
    while more or first:
        seen = 0
        for r, s in (kept if kept is not None else _reread(lf, first, slice_rows)):
            ranks_of.feed(sortable_keys(r))
            if not first:
                continue
            shown = np.isfinite(r) & (r > 0)
            if binned is not None:
                binned.add(r[shown])
            if every is None:  # the units of ok index 0, step, 2 step...
                at = np.flatnonzero(shown & np.isfinite(s) & (s > 0))
                j = np.arange(-seen % step, at.size, step, dtype=np.int64)
                spread.append((seen + j, s[at[j]], r[at[j]]))
                seen += at.size
        more = ranks_of.end_pass() if more else False
        first = False
    if binned is not None:
        counts = binned.counts()
    qs = finish(ranks_of.values(ranks))
    qs = np.where(np.isnan(qs) & (n_inf > 0), np.inf, qs)
    share = shares.result() if shares is not None else None
    scatter: tuple[np.ndarray, np.ndarray, tuple[int, int, int] | None]
    if every is not None:
        scatter = (np.concatenate([x for x, _ in every]) if every else np.zeros(0),
                   np.concatenate([y for _, y in every]) if every else np.zeros(0), None)
    else:
        ids = np.concatenate([best[2], *[i for i, _, _ in spread]])
        xs = np.concatenate([best[1], *[x for _, x, _ in spread]])
        ys = np.concatenate([best[0], *[y for _, _, y in spread]])
        _, first_pos = np.unique(ids, return_index=True)  # sorted by ok index, each once
        scatter = (xs[first_pos], ys[first_pos], (n_ok, k_top, step))
    # the top rows (largest ρ first, ties in row order), read by position
    rows = (pl.concat([lf.slice(int(p), 1) for p in np.sort(top[1])]).collect(engine="streaming")
            if top[1].size else lf.head(0).collect())
    return LossStatistics(
        height=height, n=height, max_rho=maxes["rho"], quantiles=qs, zeros=zeros,
        n_inf=n_inf, has_eps="epsilon" in cols, max_eps=maxes["epsilon"],
        has_epsd="epsilon_delta" in cols, max_epsd=maxes["epsilon_delta"], has_size=True,
        max_size=maxes["size"], share=share, hist=(edges, counts, height - n_shown),
        scatter=scatter,
        top=rows.sort("rho", descending=True, nulls_last=True, maintain_order=True))


#: Rows up to which `_losses_batched` keeps the ρ and size columns of its first read for its
#: later passes (16 bytes a row: at most 16 MiB) instead of reading the file again. A larger
#: report is read again: at 10M rows about 0.4 CPU-s more, but 160 MB less at the run's peak
#: (docs/performance.md, "Stop 66").
_KEEP_ROWS = 1 << 20


def _reread(lf: pl.LazyFrame, first: bool, slice_rows: int | None = None) -> Any:
    """Another read of ``rho`` (with ``size`` on the first of them), as ``(rho, size)`` pairs."""
    q = lf.select(_f64("rho").alias("rho"), *([_f64("size").alias("size")] if first else []))
    for b in _batches(q, slice_rows):
        r = b["rho"].to_numpy()
        yield r, (b["size"].to_numpy() if first else r)


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def _scatter_points(lf: pl.LazyFrame, ok: pl.Expr, n_ok: int, top_n: int
                    ) -> tuple[np.ndarray, np.ndarray, tuple[int, int, int] | None]:
    """The units drawn in the ρ-against-size plot (positive finite size and ρ).

    All of them up to ``_SCATTER_POINTS``, else a systematic sample: the ``k_top`` largest ρ,
    then every ``step``-th other unit in row order.
    """
    pts = lf.filter(ok).select(x=_f64("size"), y=_f64("rho"))
    if n_ok <= _SCATTER_POINTS:
        df = pts.collect(engine="streaming")
        return df["x"].to_numpy(), df["y"].to_numpy(), None
    k_top = max(_SCATTER_POINTS // 10, top_n)
    step = -(-n_ok // max(_SCATTER_POINTS - k_top, 1))
    pts = pts.with_row_index(_ROW)
    largest = pts.top_k(k_top, by=["y", _ROW], reverse=[False, True]).collect(engine="streaming")
    spread = pts.filter(pl.col(_ROW) % step == 0).collect(engine="streaming")
    df = pl.concat([largest, spread]).unique(_ROW, keep="first").sort(_ROW)
    return df["x"].to_numpy(), df["y"].to_numpy(), (n_ok, k_top, step)


def render_confidential_html(report: Mapping[str, Any]) -> str:
    """Render the CONFIDENTIAL per-record report of a release as a self-contained page.

    Sections: red "CONFIDENTIAL" banner (top and bottom), run settings (seed), overview of the
    units' actual losses (count, maximum and quantiles of ρ, maximum ε and ε(δ), budget use),
    a histogram of ρ per unit (``<figure id="plot-loss-hist">``), ρ against size with the public
    total policy curve (``<figure id="plot-loss-size">``), the ``top_n`` most exposed units, the
    ``top_n`` cells with the largest loss of each query, and the data-handling counts of each
    query.

    Args:
        report: ``{"release", "unit", "seed", "budget", "per_record" (a Polars frame: unit
            column, ``rho``, ``epsilon``, ``size``, optional ``epsilon_delta``,
            ``rho_<query>``...), "total_policy_curve", "worst_cells" ({query: frame}),
            "counts" ({query: dict}), "top_n"}``. Missing entries are shown as absent.
            ``per_record`` may be a ``pl.LazyFrame`` (e.g. ``pl.scan_parquet`` of the
            per-record file): it is then summarized with streaming queries, in memory
            independent of its number of rows, with the same exact figures; only the plot of ρ
            against size is a systematic sample above 20,000 units (its caption says so).
            ``losses``: the `loss_statistics` of ``per_record`` with this ``budget`` and
            ``top_n``, when the caller computed them already (they are then not recomputed).
            ``lifetime``: the summary's ``lifetime`` (a lifetime ledger: its budget is shown
            with the run's).

    Returns:
        The HTML document.

    Example:
        >>> import polars as pl
        >>> per = pl.DataFrame({"estab_id": [1, 2], "rho": [0.5, 2.0],
        ...                     "epsilon": [float("inf")] * 2, "size": [10.0, 1e4]})
        >>> page = render_confidential_html({"release": {"name": "demo"}, "unit": "estab_id",
        ...                                  "per_record": per, "top_n": 5})
        >>> "CONFIDENTIAL" in page and 'id="plot-loss-size"' in page
        True
    """
    from tabdp._svgchart import histogram_counts_svg, scatter_svg

    release = report.get("release") or {}
    title = _release_title(release)
    unit = str(report.get("unit") or "row")
    delta = release.get("delta")
    frame = report.get("per_record")
    top_n = report.get("top_n")
    top_n = int(top_n) if isinstance(top_n, (int, np.integer)) and top_n > 0 else 20
    budget = report.get("budget")
    bud = _budget_object(budget)
    seed = report.get("seed")
    los = report.get("losses")
    if not isinstance(los, LossStatistics):
        los = loss_statistics(frame, budget, top_n)

    head = ['<header class="masthead"><div class="page">'
            '<div class="kicker">Confidential report · per-record privacy losses</div>'
            f"<h1>{html.escape(title)}</h1>"
            '<div class="meta">'
            f"<span>Release: <b>{_e(release.get('name', ''))}</b></span>"
            f"<span>Privacy unit: <b>{_e(unit)}</b></span>"
            f"<span>Units: <b>{_e(los.height)}</b></span>"
            "</div></div></header>"]
    body = ['<div class="page">',
            '<div class="callout warn"><p><b>Keep inside the agency.</b> This page shows each '
            "unit's actual privacy loss, which reveals its size (its largest contribution to a "
            "cell), and counts computed from the records. Publish only the public folder "
            "(tables, <code>summary.json</code>, <code>summary.html</code>).</p></div>"]
    if seed is not None:
        body.append('<div class="callout warn"><p><b>Seeded run: not for production.</b> Seed '
                    f"= {_code(seed)}. The seed reproduces the noise: with it anyone could "
                    "remove the noise from the published tables.</p></div>")
    body.append(_toc([("overview", "Overview"), ("distribution", "Distribution"),
                      ("exposed", "Most exposed units"), ("cells", "Worst cells"),
                      ("handling", "Data handling")]))

    # -- overview
    stats: list[tuple[str, str]] = [("Units", _e(los.n))]
    stats.append(("Largest ρ", _e(los.max_rho)))
    if los.n:
        assert los.quantiles is not None
        for q, v in zip(("50%", "90%", "99%", "99.9%"), los.quantiles, strict=True):
            stats.append((f"ρ quantile {q}", _e(float(v))))
        stats.append(("Units with ρ = 0", _e(los.zeros)))
    # pure ε is infinite as soon as a Gaussian-type release is present: ε at δ is shown instead
    eps_inf = los.max_eps is not None and math.isinf(los.max_eps) and los.has_epsd
    if los.has_eps and not eps_inf:
        stats.append(("Largest ε (pure DP)", _e(los.max_eps)))
    if los.has_epsd:
        stats.append((f"Largest ε at δ = {fmt(_float(delta))}" if delta is not None
                      else "Largest ε(δ)", _e(los.max_epsd)))
    if los.has_size:
        stats.append(("Largest unit size", _e(los.max_size)))
    budget_note = ""
    if los.share is not None:
        share_max, near, over = los.share
        stats.append(("Largest share of budget used", _e(_percent(share_max))))
        stats.append(("Units within 10% of the budget", _e(near)))
        stats.append(("Units over the budget", _e(over)))
        if over:
            budget_note = ('<div class="callout warn"><p><b>Some units are over the budget.</b> '
                           "This should not happen: the individual filter leaves a unit out of "
                           "a query rather than let it pass its budget. Check the run.</p></div>")
    ov = [_kv(stats), budget_note, "<h3>Budget</h3>",
          _budget_html(budget, public=False, lifetime=report.get("lifetime"))]
    extra_keys = {"release", "unit", "seed", "budget", "per_record", "total_policy_curve",
                  "worst_cells", "counts", "top_n", "left_out", "max_left_out", "losses",
                  "max_left_out_key",
                  "lifetime"}
    body.append(_section("overview", "Overview", "".join(ov)))
    if report.get("left_out") is not None:
        body.append(_section("left-out", "Left out by the budget",
                             _left_out_html(report["left_out"], report.get("max_left_out"),
                                            report.get("max_left_out_key"))))

    # -- plots
    h_edges, h_counts, left_out = los.hist
    hist = histogram_counts_svg(h_edges, h_counts, left_out=left_out,
                                title="Total privacy loss ρ per unit",
                                xlabel="total ρ of a unit (log scale)")
    zero_note = (f" {los.zeros:,} unit(s) with ρ = 0 (no contribution) cannot be "
                 "shown on the log scale." if los.n and los.zeros else "")
    inf_note = (f" {los.n_inf:,} unit(s) have ρ = ∞ (approximate-DP releases) and are not shown."
                if los.n_inf else "")
    dist = [_figure("plot-loss-hist", hist,
                    "<b>How to read this plot.</b> How many units (vertical axis, logarithmic) "
                    "have each total privacy loss ρ (horizontal axis, logarithmic). Most units "
                    "should sit far to the left; the few on the right are the most exposed, "
                    "listed below." + zero_note + inf_note)]
    sample_note = ""
    if los.scatter is not None:
        sx, sy, sample = los.scatter
        sc = scatter_svg(sx, sy, title="Total loss ρ against unit size",
                         xlabel="unit size (largest contribution to one cell)",
                         ylabel="total ρ of a unit",
                         curve=report.get("total_policy_curve") or None,
                         n_total=sample[0] if sample else None)
        if sample:
            sample_note = (f" The plot shows a systematic sample of {sx.size:,} of {sample[0]:,} "
                           f"units: the {sample[1]:,} with the largest ρ and every "
                           f"{sample[2]:,}-th other unit.")
    else:
        sc = scatter_svg(np.zeros(0), np.zeros(0), title="Total loss ρ against unit size",
                         xlabel="unit size", ylabel="total ρ of a unit")
    dist.append(_figure("plot-loss-size", sc,
                        "<b>How to read this plot.</b> Each dot is a unit: its size and its "
                        "total loss ρ. The black line is the public total policy curve: the "
                        "loss of a unit contributing that size to one cell of every table, in "
                        "every currency (with several currencies a pessimistic total: each "
                        "currency's loss at the same number). "
                        "Dots lie below it when a unit contributes less to some tables, and "
                        "can lie above it when a unit contributes to several cells of a table."
                        + sample_note))
    body.append(_section("distribution", "Distribution of the losses", "".join(dist)))

    # -- most exposed units
    if los.top is not None:
        top = los.top
        if bud is not None and "size" in top.columns:
            lim = bud.limit(_col(top, "size"))
            top = top.with_columns(pl.Series("share_of_budget", _col(top, "rho") / lim))
        if eps_inf and "epsilon" in top.columns and "epsilon_delta" in top.columns:
            top = top.drop("epsilon")
        front = [c for c in (unit if unit in top.columns else None, "rho", "share_of_budget",
                             "epsilon", "epsilon_delta", "size") if c and c in top.columns]
        top = top.select(front + [c for c in top.columns if c not in front])
        why = (" Pure ε is not shown: a Gaussian-type release has no finite pure-ε guarantee "
               "(its ε is infinite for every unit), so ε at the release's δ "
               "(<code>epsilon_delta</code>) is the comparable figure." if eps_inf else "")
        exposed = (f"<p>The {min(top_n, los.height)} units with the largest total loss ρ, with "
                   "their loss in each query (<code>rho_&lt;query&gt;</code>)." + why + "</p>"
                   + _frame_table(top, percent=("share_of_budget",)))
    else:
        exposed = "<p>No units.</p>"
    body.append(_section("exposed", "Most exposed units", exposed))

    # -- worst cells
    worst = report.get("worst_cells") or {}
    wparts = []
    for q, frame in worst.items():
        df = _as_polars(frame)
        if "worst_rho" in df.columns and df.height:
            df = df.sort("worst_rho", descending=True, nulls_last=True,
                         maintain_order=True).head(top_n)
        wparts.append(f'<h3 id="{_anchor("worst", str(q))}">{_code(q)}</h3>'
                      + (_frame_table(df) if df.height else "<p>No cells.</p>"))
    body.append(_section("cells", "Worst loss per cell", (
        f"<p>For each query, the {top_n} cells whose most exposed unit has the largest loss "
        "(<code>worst_rho</code>, of a unit of size <code>worst_size</code>), with the number "
        "of units contributing to the cell.</p>" + "".join(wparts)) if wparts
        else "<p>No per-cell information.</p>"))

    # -- counts: one column per query, one row per count
    counts = {str(q): (c if isinstance(c, Mapping) else {})
              for q, c in (report.get("counts") or {}).items()}
    known = [("rows_read", "rows read"), ("rows_outside_keys", "rows outside the key set"),
             ("cells_with_data_outside_keys", "cells with data outside the key set"),
             ("rows_in_released_cells", "rows in released cells")]
    rows: list[list[Any]] = []
    for key, label in known:
        if any(key in c for c in counts.values()):
            rows.append([(html.escape(label), False)]
                        + [(_e(c.get(key)), True) for c in counts.values()])
    if any(c.get("nulls") not in (None, {}) for c in counts.values()):
        rows.append([("nulls handled", False)]
                    + [(_value(c.get("nulls")) if c.get("nulls") not in (None, {}) else _NONE,
                        False) for c in counts.values()])
    negs = [c.get("negatives") if isinstance(c.get("negatives"), Mapping) else None
            for c in counts.values()]
    if any(n is not None for n in negs):
        for key, label in (("policy", "negative values: policy"),
                           ("clipped", "negative values clipped to 0"),
                           ("dropped", "rows dropped (negative values)")):
            rows.append([(html.escape(label), False)]
                        + [(_e(n.get(key)) if n is not None else _NONE, key != "policy")
                           for n in negs])
        extra_neg = sorted({k for n in negs if n for k in n} - {"policy", "clipped", "dropped"})
        for key in extra_neg:
            rows.append([(_e("negative values: " + key), False)]
                        + [(_value(n.get(key)) if n else _NONE, False) for n in negs])
    other_keys: list[str] = []
    for c in counts.values():
        for k in c:
            if k not in {"rows_read", "rows_outside_keys", "cells_with_data_outside_keys",
                         "rows_in_released_cells", "nulls", "negatives", "name"} \
                    and k not in other_keys:
                other_keys.append(k)
    for k in other_keys:
        rows.append([(_e(k.replace("_", " ")), False)]
                    + [(_value(c.get(k)), _is_num(c.get(k))) for c in counts.values()])
    handling = ("<p>What happened to the input rows of each query. Rows outside the public key "
                "set are not published (their cells do not exist in the release). "
                "<b>tabdp never clips values for sensitivity: losses grow with record size "
                "instead.</b> The only values changed are negative measures under the "
                "<code>zero</code> policy (clipped to 0) and the rows removed under the "
                "<code>drop</code> policies, as counted here.</p>")
    if counts:
        handling += _table(["count"] + [_code(q) for q in counts], rows, raw=True)
    else:
        handling += "<p>No counts.</p>"
    body.append(_section("handling", "Data handling", handling))
    extra = {k: v for k, v in report.items() if k not in extra_keys}
    if extra:
        body.append(_section("other", "Other information",
                             _kv([(str(k), _value(v)) for k, v in extra.items()])))
    body.append(f"<footer>Confidential report of release {_code(release.get('name', ''))}. "
                "This page loads nothing from the network.</footer></div>")
    from tabdp._version import __version__

    return _page(f"CONFIDENTIAL — {title} — per-record losses", __version__,
                 "".join(head) + "".join(body) + f'<div class="banner">{_BANNER_TEXT}</div>',
                 banner=f'<div class="banner top" role="alert">{_BANNER_TEXT}</div>')
