"""``compare_report.html``: the comparison for a disclosure review board (CONFIDENTIAL).

Built with the report and plotting helpers of the release reports (one page style, one
plotting style): self-contained HTML with inline SVG plots.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl
from matplotlib import rc_context

from tabdp import plotting as P
from tabdp.report import html as H


def usable_bars_svg(rows: Sequence[Mapping[str, Any]], *, title: str) -> str:
    """Grouped bars: share of usable cells by level (x) and method (colour).

    Args:
        rows: ``{"label", "method", "usable_share"}`` per bar.
        title: Plot title.

    Returns:
        An ``<svg ...>...</svg>`` string.

    Example:
        >>> svg = usable_bars_svg([{"label": "county", "method": "DP", "usable_share": 0.5},
        ...                        {"label": "county", "method": "OPT", "usable_share": 0.7}],
        ...                       title="Usable cells")
        >>> svg.startswith("<svg")
        True
    """
    labels = list(dict.fromkeys(str(r["label"]) for r in rows))
    methods = list(dict.fromkeys(str(r["method"]) for r in rows))
    with rc_context(P._RC):
        fig, (ax,) = P._new_figure(width=max(7.2, 0.55 * len(labels) * len(methods) + 2),
                                   height=4.6)
        if not rows:
            P._no_data(ax)
        w = 0.8 / max(len(methods), 1)
        x = np.arange(len(labels))
        for j, m in enumerate(methods):
            vals = [next((float(r["usable_share"]) for r in rows
                          if str(r["label"]) == lb and str(r["method"]) == m), np.nan)
                    for lb in labels]
            ax.bar(x + (j - (len(methods) - 1) / 2) * w, vals, w * 0.95, label=P._text(m),
                   color=P.PALETTE[j % len(P.PALETTE)])
        ax.set_xticks(x)
        ax.set_xticklabels([P._text(lb) for lb in labels], rotation=30, ha="right",
                           fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("share of cells usable")
        ax.set_title(P._text(title))
        if rows:
            ax.legend(loc="best")
        return P._to_svg(fig, "bars", title)


def _pct(x: Any) -> str:
    return "—" if x is None else f"{100 * float(x):.1f}%"


def _num(x: Any) -> str:
    return H.fmt(x)


def _linked_html(linked: Mapping[str, Any]) -> str:
    """The linked-tables rounds in a sentence per group of tables that share cells."""
    if not linked:
        return ""
    if not linked.get("applied"):
        return (f"<p>Linked tables ({html.escape(str(linked.get('mode')))}): not applied, "
                f"{html.escape(str(linked.get('reason', '')))}.</p>")
    out = []
    for g in linked.get("groups") or []:
        forced = ", ".join(f"{k}: {v}" for k, v in (g.get("forced_cells") or {}).items())
        state = ("consistent" if g.get("converged") else
                 "<b>not consistent</b> (round limit reached: some shared cells are still "
                 "withheld in one table and published in another)")
        out.append(f"<p>Linked tables {html.escape(', '.join(g['tables']))}: "
                   f"{g.get('reruns', 0)} Tau-Argus round(s) after the first, {state}; "
                   f"cells suppressed a-priori because another table withholds them: "
                   f"{html.escape(forced)}.</p>")
    return "".join(out)


def render_compare_html(summary: Mapping[str, Any], cells: pl.DataFrame,
                        losses: pl.DataFrame) -> str:
    """Render the comparison page.

    Args:
        summary: The content of ``compare.json``.
        cells: Every cell of the traditional release (``sdc_cells.parquet``).
        losses: The DP release's per-record losses (``per_record_losses.parquet``).

    Returns:
        The HTML document.

    Example:
        >>> import polars as pl
        >>> page = render_compare_html({"release": "x", "sdc": {"described": "p% rule"},
        ...                             "utility": [], "coverage": [], "risk": {},
        ...                             "audit": {}, "tables": []}, pl.DataFrame(),
        ...                            pl.DataFrame())
        >>> "CONFIDENTIAL" in page and 'id="plot-usable"' in page
        True
    """
    from tabdp._version import __version__

    sdc = summary.get("sdc") or {}
    body: list[str] = ['<header class="masthead"><div class="page">'
                       '<div class="kicker">Confidential report · DP against traditional '
                       "disclosure control</div>"
                       f"<h1>{html.escape(str(summary.get('release', '')))}</h1>"
                       f'<div class="meta"><span>Traditional release: <b>'
                       f"{html.escape(str(sdc.get('described', '')))}</b> (Tau-Argus)</span>"
                       "</div></div></header>", '<div class="page">',
                       '<div class="callout warn"><p><b>Keep inside the agency.</b> This page '
                       "compares both releases with the true tables and shows what an intruder "
                       "learns about withheld cells: every figure is built from the "
                       "confidential data.</p></div>"]
    life = summary.get("lifetime_ledger") or {}
    if life.get("applied"):
        gone = [f"{t}: {v.get('units')}" for t, v in (life.get("left_out") or {}).items()
                if v.get("units")]
        body.append(
            '<div class="callout"><p><b>Lifetime ledger: read, not charged.</b> The DP side '
            f"read the series' ledger ({html.escape(str(life.get('series')))}: "
            f"{len(life.get('releases_read') or [])} earlier release(s)) and left out the "
            "units at their lifetime budget as <code>tabdp run</code> would ("
            + html.escape("units left out per table: " + ", ".join(gone) if gone else
                          "no unit left out")
            + "). It charged the ledger nothing: its own losses are counted nowhere, so "
            "its tables (<code>dp_release/</code>) must never be published.</p></div>")
    body.append(H._toc([("utility", "Utility"), ("coverage", "Small areas"),
                        ("audit", "Audit of the suppression"), ("risk", "Risk side by side"),
                        ("tables", "Tables and timings")]))

    # -- utility
    util = list(summary.get("utility") or [])
    rows = [[u["table"], u["measure"], u["level"], u["method"], u["cells"],
             _pct(u["published_share"]), _pct(u["usable_share"]),
             _pct(u.get("median_rel_error")), _pct(u.get("p90_rel_error")),
             _pct(u.get("rel_bias"))] for u in util]
    bars = [{"label": f"{u['table']} / {u['measure']}: {u['level']}", "method": u["method"],
             "usable_share": u["usable_share"]} for u in util]
    ubody = (H._figure("plot-usable", usable_bars_svg(bars, title="Usable cells by level "
                                                      "and method"),
                       "Share of cells a user can use: DP cells without a C, S or X flag; "
                       "traditional cells that are published.")
             + H._table(["Table", "Measure", "Level", "Method", "Cells", "Published",
                         "Usable", "Median rel. error", "90% rel. error", "Rel. bias"], rows,
                        caption="Utility against the truth (errors of usable cells; the "
                                "traditional release publishes exact values, or rounded ones)"))
    body.append(H._section("utility", "Utility", ubody))

    cov = list(summary.get("coverage") or [])
    body.append(H._section("coverage", "Small areas", H._table(
        ["Table", "Measure", "Area level", "Areas with data", "DP",
         "Traditional (the same cells)", "Traditional (also its margins the DP spec does "
         "not release)"],
        [[c["table"], c["measure"], c["area_level"], c["areas_with_data"], _pct(c["dp"]),
          _pct(c["sdc"]), _pct(c.get("sdc_all_levels"))] for c in cov],
        caption="Share of areas with at least one usable published value: both methods "
                "scored on the levels the DP release publishes, and the traditional table "
                "with all its margins (e.g. an area's total over all industries)")))

    # -- audit
    audit = summary.get("audit") or {}
    groups = list(audit.get("groups") or [])
    arows = [[g["measure"], ", ".join(g["tables"]), g["cells"], g["withheld"], g["audited"],
              g["pinned_by_one_equation"], g["linked_disclosures"], g["linear_programmes"],
              g["largest_component"], _num(g["seconds"])] for g in groups]
    widths = np.array([], dtype=np.float64)
    if cells.height and "audit_lower" in cells.columns:
        a = cells.filter(pl.col("audit_lower").is_not_null() & (pl.col("value") > 0))
        widths = ((a["audit_upper"] - a["audit_lower"]) / a["value"]).to_numpy()
    tc = summary.get("tau_audit_check") or {}
    tau_txt = ""
    if tc.get("tables"):
        tau_txt = (f"<p>Tau-Argus' own audit (a-priori bounds: 0 to 1.5 × the table's "
                   f"largest cell) agrees with the LP audit under the same bounds to "
                   f"{_num(tc.get('max_abs_diff'))} (absolute; {_num(tc.get('max_rel_diff'))} "
                   "of the largest cell).</p>")
    if tc.get("not_run"):
        nr = tc["not_run"]
        tau_txt += (f"<p>Tau-Argus' own audit was not run on {html.escape(', '.join(nr['tables']))}"
                    f" ({html.escape(nr['reason'])}).</p>")
    tau_txt += _linked_html(summary.get("linked") or {})
    body.append(H._section("audit", "Audit of the suppression", (
        "<p>For every withheld cell, the smallest and largest value consistent with everything "
        "the traditional release publishes (all its tables, every margin, the hierarchies) and "
        "with non-negative cells: two linear programmes per cell (HiGHS). A primary cell is "
        "protected when the interval reaches the protection its rule requires on both "
        "sides.</p>" + tau_txt
        + H._table(["Measure", "Tables", "Cells", "Withheld", "Audited", "Pinned by one "
                    "equation", "Withheld here, published in another table", "LPs",
                    "Largest group", "Seconds"], arows)
        + H._figure("plot-widths", P.histogram_svg(widths, title="Intruder interval width",
                                                   xlabel="interval width / true value"),
                    "Width of the interval an intruder derives for each withheld cell, "
                    "relative to its true value (0: recovered exactly; cells of width 0 are "
                    "counted as left out of the log axis)."))))

    # -- risk
    risk = summary.get("risk") or {}
    dp = risk.get("dp") or {}
    sd = risk.get("sdc") or {}
    kv: list[tuple[str, str]] = [("DP: records", H._e(dp.get("records")))]
    for key, name in (("rho", "ρ"), ("epsilon_delta", f"ε at δ = {dp.get('delta')}")):
        if key in dp:
            q = dp[key]
            kv.append((f"DP: {name} (median / 90% / 99% / max)",
                       " / ".join(_num(q[k]) for k in ("median", "p90", "p99", "max"))))
    if "posterior_odds_factor" in dp:
        po = dp["posterior_odds_factor"]
        kv.append(("DP: e^ε, the factor of that bound (median / max record)",
                   f"{_num(po['median'])} / {_num(po['max'])}"))
    kv.append(("Traditional: primary cells pinned within their rule's protection (each pins "
               "its largest contributor; a record largest in several is counted per cell)",
               H._e(sd.get("records_pinned"))))
    srows = [[p["table"], p["measure"], p["method"], p["primary_cells"],
              p["contributions_to_primary_cells"], p["under_protected_primary"],
              p["withheld_cells_recovered_exactly"]] for p in sd.get("tables") or []]
    wrows = [[w["table"], w["measure"], w["cell"], w["contributors"], _num(w["value"]),
              _num(w["largest"]), f"[{_num(w['interval'][0])}, {_num(w['interval'][1])}]",
              _num(w["required_below"]), _num(w["required_above"]),
              _pct(w["achieved_share_of_required"])] for w in sd.get("worst") or []]
    svg = P.scatter_svg(losses["size"].to_numpy() if "size" in losses.columns else np.zeros(0),
                        losses["rho"].to_numpy() if "rho" in losses.columns else np.zeros(0),
                        title="DP: per-record loss against size", xlabel="record size",
                        ylabel="ρ (total over the release)")
    body.append(H._section("risk", "Risk side by side", (
        "<p>DP bounds every record's loss: for every set of possible published tables, the "
        "probability of that set with the record in the data is at most e<sup>ε</sup> times "
        "its probability without the record, plus δ (and the same with the two swapped). "
        "Suppression gives no bound: a record is exposed when the audit pins its cell "
        "within the protection the rule requires (the p% rule protects the largest "
        "contributor against the second largest).</p>"
        + H._kv(kv)
        + H._figure("plot-loss-size", svg, "DP: each record's total ρ against its size.")
        + H._table(["Table", "Measure", "Method", "Primary cells", "Contributors to "
                    "primary cells (summed over cells)", "Under-protected primary cells",
                    "Withheld cells recovered exactly"], srows,
                   caption="Suppression: cells and records exposed")
        + H._table(["Table", "Measure", "Cell", "Contributors", "Value", "Largest",
                    "Intruder interval", "Required below", "Required above",
                    "Achieved / required"], wrows,
                   caption="Worst under-protected cells"))))

    trows = [[t["table"], t["measure"], t["method"], t["cells"],
              ", ".join(f"{k}: {v}" for k, v in (t.get("statuses") or {}).items()),
              _num(t.get("tau_seconds"))] for t in summary.get("tables") or []]
    tim = summary.get("timings_seconds") or {}
    body.append(H._section("tables", "Tables and timings", H._table(
        ["Table", "Measure", "Method", "Cells", "Statuses (S safe, U primary, M secondary, "
         "E empty)", "Tau-Argus seconds"], trows)
        + H._kv([(k, _num(v)) for k, v in tim.items()])
        + "".join(f"<p>Not compared: {html.escape(s['table'])} ({html.escape(s['reason'])})"
                  "</p>" for s in summary.get("skipped") or [])))
    body.append("</div>")
    return H._page(f"Comparison — {summary.get('release', '')}", __version__,
                   "".join(body) + f'<div class="banner">{H._BANNER_TEXT}</div>',
                   banner=f'<div class="banner top" role="alert">{H._BANNER_TEXT}</div>')
