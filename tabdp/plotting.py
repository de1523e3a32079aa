"""Plots explaining tabdp's defaults (needs matplotlib, a dependency of tabdp).

[`plot_smooth_noise_std`][tabdp.plotting.plot_smooth_noise_std] reproduces [HT24]'s Figure 1: the
standard deviation of each smooth-sensitivity noise family, per unit of smooth sensitivity (SS),
against the smoothness γ at a fixed ε. It shows why PolyPlace is the default of ``df.dp.median`` /
``df.dp.quantile``: at every γ its noise is the smallest of the families usable with smooth
sensitivity, and it stays finite up to γ = ε/2 (Student's t stops at ε/3, the generalized Cauchy at
ε/4, Laplace-with-SS at ε/ln(2/δ)). The numbers are those of
[`std_vs_gamma`][tabdp.mechanisms.smooth.std_vs_gamma]; the plot only draws them.

Figures are built on matplotlib's non-interactive Agg canvas, without pyplot: nothing is shown, no
display is needed, no pyplot figure is left open, and the global backend of the caller (e.g. a
notebook's) is left alone. In a notebook the returned figure displays itself; elsewhere save it
with ``fig.savefig(...)`` or [`save_smooth_noise_std`][tabdp.plotting.save_smooth_noise_std].

The inline SVG figures of a release's HTML reports (``summary.html``, the confidential report)
live here too ([`loss_curves_svg`][tabdp.plotting.loss_curves_svg],
[`moe_curves_svg`][tabdp.plotting.moe_curves_svg], [`histogram_svg`][tabdp.plotting.histogram_svg],
[`scatter_svg`][tabdp.plotting.scatter_svg]), each returning an ``<svg ...>...</svg>`` string ready
to paste into an HTML page (no XML header, no DOCTYPE, no external reference), byte-identical for
the same input, with element ids that two plots of one page (different titles) never share, and
text kept as SVG ``<text>``. The public page's curves draw on a fresh `matplotlib.figure.Figure` on
the Agg canvas (``svg.fonttype = "none"``, no creation date, ids derived from a fixed salt, the
plot kind and its title) and are cached on disk
([`public_figure_svg`][tabdp.plotting.public_figure_svg]). The confidential page's histogram and
scatter, drawn from the data on every release, are written as SVG directly, without matplotlib,
in the same style (a scatter's points are one embedded 200-dpi PNG layer): a release whose public
figures are cached imports no plotting library. Colours: tables use the matplotlib ``tab10``
palette in order ([`PALETTE`][tabdp.plotting.PALETTE]); a curve labelled ``"total"`` is drawn
thick and black.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import pathlib
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure, SubFigure
from matplotlib.ticker import LogFormatter
from numpy.typing import ArrayLike

from tabdp._histogram import histogram_bin_index, histogram_edges
from tabdp._svgchart import (
    _TOTAL_COLOR,
    PALETTE,
    _float,
    _positive_pairs,
    histogram_counts_svg,
    histogram_svg,
    power_text,
    scatter_svg,
)
from tabdp._validation import check_real
from tabdp.exceptions import InvalidParameterError
from tabdp.mechanisms.smooth import DEFAULT_DELTA, std_vs_gamma

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

__all__ = [
    # [HT24]'s Figure 1 (smooth-sensitivity noise)
    "plot_smooth_noise_std",
    "save_smooth_noise_std",
    "SMOOTH_NOISE_CURVES",
    # the figures of a release's HTML reports (inline SVG)
    "PALETTE",
    "loss_curves_svg",
    "moe_curves_svg",
    "histogram_svg",
    "histogram_counts_svg",
    "histogram_edges",
    "histogram_bin_index",
    "scatter_svg",
    "public_figure_svg",
]


#: Curves of :func:`plot_smooth_noise_std`, in drawing order: key of
#: :func:`tabdp.mechanisms.smooth.std_vs_gamma` → legend label (``{delta}`` is filled in).
SMOOTH_NOISE_CURVES: dict[str, str] = {
    "polyplace": "PolyPlace (pure DP; tabdp default)",
    "student_t": "Student's t, optimal $d$ (pure DP)",
    "cauchy": "generalized Cauchy, optimal $c$ (pure DP)",
    "laplace": r"Laplace with SS ($(\varepsilon, \delta)$-DP, $\delta = {delta}$)",
    "laplace_global": r"Laplace with global sensitivity, $\sqrt{{2}}/\varepsilon$ (reference)",
}
_STYLE: dict[str, dict[str, Any]] = {
    "polyplace": {"color": "C3", "linewidth": 2.4, "zorder": 5},
    "student_t": {"color": "C0", "linewidth": 1.6},
    "cauchy": {"color": "C2", "linewidth": 1.6},
    "laplace": {"color": "C1", "linewidth": 1.6},
    "laplace_global": {"color": "0.35", "linewidth": 1.2, "linestyle": "--"},
}
_OWNER = "plot_smooth_noise_std"
_FORMATS = {".png": "png", ".svg": "svg"}


def _gamma_grid(eps: float, gammas: ArrayLike | None, log: bool) -> np.ndarray | None:
    """The γ grid: validated user values, or the default (geometric when ``log``)."""
    if gammas is None:
        # std_vs_gamma's own default (linear on (0, ε/2)) suits linear axes; a geometric grid
        # from 10⁻³·ε to just below ε/2 spreads the points evenly on a log γ axis.
        return np.geomspace(1e-3, 0.495, 200) * eps if log else None
    try:
        g = np.asarray(gammas, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError(
            f"{_OWNER}: gammas must be a sequence of real numbers; got {gammas!r}.") from exc
    if g.size == 0 or not np.all(np.isfinite(g)) or not np.all(g > 0.0):
        raise InvalidParameterError(
            f"{_OWNER}: gammas must be a non-empty sequence of finite values > 0; got "
            f"{gammas!r}.\nHint: e.g. gammas=numpy.geomspace(1e-3, 0.49, 100) * epsilon.")
    return g


def _tex_number(x: float) -> str:
    r"""``x`` for mathtext: ``1e-05`` → ``10^{-5}``, ``2.5e-06`` → ``2.5\times10^{-6}``."""
    text = f"{x:.3g}"
    if "e" not in text:
        return text
    mant, exp = text.split("e")
    power = f"10^{{{int(exp)}}}"
    return power if mant == "1" else rf"{mant}\times{power}"


def _root_figure(ax: Axes) -> Figure:
    fig: Figure | SubFigure | None = ax.figure
    while isinstance(fig, SubFigure):
        fig = fig.figure
    if not isinstance(fig, Figure):  # pragma: no cover - an Axes always belongs to a figure
        raise InvalidParameterError(f"{_OWNER}: ax does not belong to a matplotlib figure.")
    return fig


def plot_smooth_noise_std(epsilon: float = 1.0, gammas: ArrayLike | None = None, *,
                          ax: Axes | None = None, delta: float = DEFAULT_DELTA,
                          log: bool = True) -> Figure:
    """Plot the noise std per unit smooth sensitivity of each family against γ ([HT24] Fig. 1).

    One line per entry of [`SMOOTH_NOISE_CURVES`][tabdp.plotting.SMOOTH_NOISE_CURVES], drawing
    exactly the arrays of [`std_vs_gamma`][tabdp.mechanisms.smooth.std_vs_gamma]: PolyPlace,
    Student's t and the generalized Cauchy (shape d / c chosen to minimize the std at each γ),
    Laplace with smooth sensitivity (approximate DP at ``delta``; only where γ < ε/ln(2/δ)), and,
    dashed, Laplace noise √2/ε calibrated to the *global* sensitivity — the γ → 0 limit of
    PolyPlace, which however multiplies the larger global sensitivity rather than SS. A family is
    left out (a gap in its line) where its std is infinite. The smaller the curve, the less noise a
    release adds for the same smooth sensitivity.

    Args:
        epsilon: Privacy budget ε of one release.
        gammas: Smoothness values to plot (all > 0). Default: 200 points from 10⁻³·ε to
            0.495·ε, geometric when ``log`` (else those of ``std_vs_gamma``, linear on (0, ε/2)).
        ax: Axes to draw on (e.g. a panel of a larger figure); default: a new 7 × 4.5 inch figure
            on the Agg canvas.
        delta: δ of the Laplace-with-SS curve.
        log: Logarithmic γ and std axes (as the ratios between families span orders of
            magnitude); ``False`` for linear axes. Either way the std axis stops at 50× (log) or
            10× (linear) the Laplace reference √2/ε, where the baselines have left for infinity.

    Returns:
        The figure holding the plot (the figure of ``ax`` when given).

    Raises:
        InvalidParameterError: For ε ≤ 0, δ outside (0, 1), γ values that are not finite and
            positive, or a non-bool ``log``.

    Example:
        >>> import matplotlib.pyplot as plt
        >>> fig = plot_smooth_noise_std(1.0, [0.01, 0.1, 0.3])
        >>> ax = fig.axes[0]
        >>> [line.get_label().split(" ")[0] for line in ax.get_lines()]
        ['PolyPlace', "Student's", 'generalized', 'Laplace', 'Laplace']
        >>> ax.get_xscale(), ax.get_yscale()
        ('log', 'log')
        >>> [round(float(y), 4) for y in ax.get_lines()[0].get_ydata()]   # PolyPlace
        [1.4376, 1.6875, 2.7705]
        >>> plt.close(fig)
    """
    eps = check_real("epsilon", epsilon, owner=_OWNER, gt=0.0,
                     hint="epsilon is the privacy budget of one release, e.g. epsilon=1.0")
    dl = check_real("delta", delta, owner=_OWNER, gt=0.0, lt=1.0,
                    hint="delta is the additive δ of (ε, δ)-DP of Laplace with SS, e.g. 1e-5")
    if not isinstance(log, (bool, np.bool_)):
        raise InvalidParameterError(f"{_OWNER}: log must be True or False; got {log!r}.")
    if ax is not None and not isinstance(ax, Axes):
        raise InvalidParameterError(
            f"{_OWNER}: ax must be a matplotlib Axes; got {type(ax).__name__}.")
    data = std_vs_gamma(eps, _gamma_grid(eps, gammas, bool(log)), delta=dl)

    if ax is None:
        fig = Figure(figsize=(7.0, 4.5), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
    else:
        fig = _root_figure(ax)
    g = data["gamma"]
    for key, label in SMOOTH_NOISE_CURVES.items():
        ax.plot(g, data[key], label=label.format(delta=_tex_number(dl)), **_STYLE[key])
    if log:
        ax.set_xscale("log")
        ax.set_yscale("log")
    # The baselines blow up at their limits of γ (to ~10⁴ per unit SS); cap the view at 50× (log
    # axes) or 10× (linear) the Laplace reference so the region where the families differ stays
    # readable. The lines keep all their data.
    top = (50.0 if log else 10.0) * float(data["laplace_global"][0])
    if log:
        ax.set_ylim(top=min(ax.get_ylim()[1], top))
    else:
        ax.set_ylim(0.0, min(ax.get_ylim()[1], top))
    ax.set_xlabel(r"smoothness $\gamma$")
    ax.set_ylabel("noise standard deviation per unit SS")
    ax.set_title(rf"Noise for smooth sensitivity at $\varepsilon$ = {eps:g}: "
                 "standard deviation against $\\gamma$")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize="small", framealpha=0.9)
    return fig


def save_smooth_noise_std(path: str | os.PathLike[str], *, dpi: float = 150.0,
                          **kwargs: Any) -> pathlib.Path:
    """Draw `plot_smooth_noise_std` and write it to a PNG or SVG file (by extension).

    Args:
        path: Destination ending in ``.png`` or ``.svg`` (case-insensitive); parent folders must
            exist.
        dpi: Resolution of a PNG.
        **kwargs: Passed to [`plot_smooth_noise_std`][tabdp.plotting.plot_smooth_noise_std]
            (``epsilon``, ``gammas``, ``delta``, ``log``; not ``ax``).

    Returns:
        The path written.

    Raises:
        InvalidParameterError: For another extension, a bad ``dpi`` or bad plot arguments.

    Example:
        >>> import tempfile, pathlib
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     out = save_smooth_noise_std(pathlib.Path(tmp) / "fig1.svg", epsilon=1.0)
        ...     out.name, out.read_bytes().lstrip()[:5]
        ('fig1.svg', b'<?xml')
    """
    p = pathlib.Path(path)
    fmt = _FORMATS.get(p.suffix.lower())
    if fmt is None:
        raise InvalidParameterError(
            f"save_smooth_noise_std: path must end in .png or .svg; got {str(path)!r}.")
    if "ax" in kwargs:
        raise InvalidParameterError(
            "save_smooth_noise_std: ax is not accepted (the function makes its own figure).\n"
            "Hint: call plot_smooth_noise_std(ax=...) and save that figure instead.")
    dpi = check_real("dpi", dpi, owner="save_smooth_noise_std", gt=0.0)
    fig = plot_smooth_noise_std(**kwargs)
    # No creation date and salted (not random) element ids in the SVG, so the same arguments
    # give the same bytes.
    meta: dict[str, Any] = {"Date": None} if fmt == "svg" else {}
    with rc_context({"svg.hashsalt": "tabdp"}):
        fig.savefig(p, format=fmt, dpi=dpi, metadata=meta)
    return p


# ================================================================================================
# The figures of a release's HTML reports (inline SVG)
# ================================================================================================
#: Line colours, in order (matplotlib's ``tab10``): distinctive, colour-blind-friendlier than the
#: default cycle of older versions, and easy to find in a screenshot.
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")

_RC: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica"],
    "font.size": 10.0,
    "axes.titlesize": 11.5,
    "axes.titleweight": "bold",
    "axes.labelsize": 10.0,
    "axes.edgecolor": "#555555",
    "axes.linewidth": 0.8,
    "xtick.color": "#333333",
    "ytick.color": "#333333",
    "legend.fontsize": 9.0,
    "legend.frameon": True,
    "legend.framealpha": 0.92,
    "legend.edgecolor": "#cccccc",
    "svg.image_inline": True,
}


# -- helpers --------------------------------------------------------------------------------------
def _text(s: object) -> str:
    """Plain text for matplotlib: ``$`` would start mathtext (and can fail to parse)."""
    return str(s).replace("$", r"\$")


def _drawing_disabled(renderer: Any) -> bool:
    """Whether ``renderer`` is in matplotlib's ``_draw_disabled`` state (a dry-run draw).

    ``RendererBase._draw_disabled`` sets no-op ``draw_*`` methods on the renderer instance; an
    SVG figure is drawn through a ``MixedModeRenderer`` that forwards to its vector renderer.
    """
    target = getattr(renderer, "_vector_renderer", renderer)
    return "draw_path" in vars(target) or "draw_path" in vars(renderer)


class _ReportFigure(Figure):
    """A Figure whose dry-run draw only runs the layout engine.

    ``savefig`` of a figure with a layout engine first draws the whole figure on a renderer
    whose drawing calls are no-ops, only to run the layout (constrained layout) at the output's
    dpi, then draws it for real with the layout engine switched off. The dry run's artist pass
    computes nothing the real draw does not compute again (ticks, text and legend positions are
    all recomputed in every draw), so this figure runs the layout and stops there: the same
    layout, the same bytes (``tests/test_plotting.py`` compares the SVG with plain matplotlib's),
    about a fifth less drawing time.
    """

    def draw(self, renderer: Any) -> None:
        # matplotlib internals used by Figure.draw; without them (another matplotlib), draw fully
        lock = getattr(self, "_render_lock", None)
        draw_artists = getattr(self, "_get_draw_artists", None)
        if (lock is None or draw_artists is None
                or not (self.get_visible() and _drawing_disabled(renderer))):
            super().draw(renderer)
            return
        with lock:  # Figure.draw up to the layout, without drawing the artists
            draw_artists(renderer)  # applies each axes' aspect, as Figure.draw does
            try:
                engine = self.get_layout_engine()
                if self.axes and engine is not None:
                    try:
                        engine.execute(self)
                    except ValueError:  # as Figure.draw: can occur when resizing a window
                        pass
            finally:
                self.stale = False


def _new_figure(width: float = 7.2, height: float = 4.2, ncols: int = 1) -> tuple[Figure,
                                                                               list[Axes]]:
    fig = _ReportFigure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    for ax in axes:
        ax.set_facecolor("white")
    fig.set_facecolor("white")
    return fig, axes


def _to_svg(fig: Figure, kind: str, title: str) -> str:
    """Serialize ``fig`` as a deterministic ``<svg>`` element string.

    Layers drawn with ``rasterized=True`` (dense scatter points) are embedded as a PNG
    ``data:`` URI at 200 dpi; everything else stays vector.
    """
    salt = "tabdp-" + hashlib.sha256(f"{kind}\x00{title}".encode()).hexdigest()[:16]
    buf = io.StringIO()
    with rc_context({"svg.hashsalt": salt, "svg.fonttype": "none"}):
        # No metadata block at all: no date (determinism) and no RDF resource URLs.
        fig.savefig(buf, format="svg", dpi=200,
                    metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    fig.clear()
    text = buf.getvalue()
    start = text.find("<svg")
    svg = _namespace_ids(text[start:].strip(), f"{kind}-{salt[6:14]}")
    # Accessible name for screen readers; the <title> child shows as a tooltip.
    return re.sub(r"<svg\b", f'<svg role="img" aria-label="{_attr(title)}"', svg, count=1)


_ID_REF = re.compile(r'(\bid="|href="#|url\(#)([^"\)]+)')


def _namespace_ids(svg: str, prefix: str) -> str:
    """Prefix every element id (and the references to it) with ``prefix``.

    matplotlib names groups ``figure_1``, ``axes_1``, ``line2d_1``... in every figure: inlined
    in one HTML page, two plots would otherwise share ids.
    """
    ids = set(re.findall(r'\bid="([^"]+)"', svg))

    def sub(m: re.Match[str]) -> str:
        name = m.group(2)
        return m.group(1) + (f"{prefix}-{name}" if name in ids else name)

    return _ID_REF.sub(sub, svg)


def _attr(s: str) -> str:
    return (s.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
            .replace(">", "&gt;"))


def _no_data(ax: Axes, message: str = "no data to plot") -> None:
    ax.text(0.5, 0.5, message, transform=ax.transAxes, ha="center", va="center",
            color="#666666", fontsize=11)
    ax.set_xticks([])
    ax.set_yticks([])


class _PowerFormatter(LogFormatter):
    """Log-axis labels as plain Unicode text (``10⁵``).

    No mathtext: no TeX-like parsing (which dominates the drawing time), plain ``<text>`` in
    the SVG.
    """

    def _num_to_string(self, x: float, vmin: float, vmax: float) -> str:
        return power_text(float(x))


def _log_axis(axis: Any) -> None:
    axis.set_major_formatter(_PowerFormatter(base=10.0))
    axis.set_minor_formatter(_PowerFormatter(base=10.0, labelOnlyBase=False))


def _style_log_axes(ax: Axes) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    _log_axis(ax.xaxis)
    _log_axis(ax.yaxis)
    ax.grid(True, which="major", color="#d9d9d9", linewidth=0.8)
    ax.grid(True, which="minor", color="#eeeeee", linewidth=0.5)
    ax.set_axisbelow(True)


def _titled(fig: Figure, axes: Sequence[Axes], title: str) -> Figure:
    """``fig`` titled: the figure over several panels (each titled by its unit), else its one."""
    if len(axes) > 1:
        fig.suptitle(_text(title))
    else:
        axes[0].set_title(_text(title))
    return fig


def _legend(ax: Axes, n: int) -> None:
    if n:
        ax.legend(loc="best", ncols=1 if n <= 6 else 2)


def public_figure_svg(render: Any, *args: Any, **kwargs: Any) -> str:
    """``render(*args, **kwargs)`` (an SVG figure of **public** inputs), cached on disk.

    The public page's figures (loss curves, margins of error) follow from the release plan
    alone (policy curves, mechanisms, levels), not from the data, and a release run with the
    same plan draws the same bytes again. They are kept in the samplers' cache folder
    (``$TABDP_CACHE_DIR``, `tabdp._cache`; ``off`` disables it), under ``figures/``, keyed by
    the SHA-256 of the inputs, the tabdp and matplotlib versions and every rc setting (the live
    ``rcParams`` once matplotlib is imported, else the contents of every matplotlibrc file
    matplotlib could read: a lookup imports no matplotlib), each file
    holding its key and the SHA-256 of its SVG: a file that does not match (truncated, changed,
    another key) is drawn again and replaced. Writes are atomic (``os.replace``); a cache that
    cannot be read or written only means the figure is drawn. Never call it with data-dependent
    inputs: the cache folder is not the confidential output folder.

    Args:
        render: The figure function (e.g. `loss_curves_svg`).
        *args: Its positional arguments (JSON-serialisable: mappings, sequences, numbers,
            strings, NumPy arrays).
        **kwargs: Its keyword arguments.

    Returns:
        The SVG, byte for byte what ``render(*args, **kwargs)`` returns.

    Example:
        >>> rows = [{"delta": 1.0, "rho": 0.1}, {"delta": 10.0, "rho": 0.5}]
        >>> svg = public_figure_svg(loss_curves_svg, {"t": rows}, title="Loss")
        >>> svg == loss_curves_svg({"t": rows}, title="Loss")
        True
    """
    from tabdp._figcache import cached_svg

    return cached_svg(f"{render.__module__}.{render.__qualname__}",
                      lambda: render(*args, **kwargs), args, kwargs)


# -- public plots ---------------------------------------------------------------------------------
#: One plotted series: its legend label, x and y (finite, > 0, sorted by x).
_Series = tuple[str, np.ndarray, np.ndarray]


def _merge_identical(series: Sequence[_Series]) -> list[_Series]:
    """Series with exactly the same points drawn once, their labels joined ("a, b")."""
    merged: dict[bytes, tuple[list[str], np.ndarray, np.ndarray]] = {}
    for label, x, y in series:
        sig = np.concatenate([x, y]).tobytes() + str(x.size).encode()
        merged.setdefault(sig, ([], x, y))[0].append(label)
    return [(", ".join(labels), x, y) for labels, x, y in merged.values()]


def _by_unit(labels: Sequence[str], units: Mapping[str, str] | None) -> dict[str | None, list[str]]:
    """Labels grouped by their unit of measure (one group, ``None``, without ``units``)."""
    groups: dict[str | None, list[str]] = {}
    for label in labels:
        unit = None if units is None else units.get(label)
        groups.setdefault(unit if unit is None else str(unit), []).append(label)
    return groups


def _panel_figure(n: int) -> tuple[Figure, list[Axes]]:
    return _new_figure(width=7.2 if n == 1 else max(7.2, 4.4 * n), height=4.2, ncols=n)


def _sum_curves(rows: Sequence[Sequence[Mapping[str, Any]]], key: str) -> list[dict[str, Any]]:
    """Pointwise sum of loss curves at the record sizes every curve has a finite value for."""
    common: dict[float, float] | None = None
    for curve in rows:
        values: dict[float, float] = {}
        for r in curve:
            d, v = _float(r.get("delta")), _float(r.get(key))
            if d is not None and v is not None:
                values[d] = v
        common = values if common is None else {d: common[d] + v for d, v in values.items()
                                                if d in common}
    return [{"delta": d, key: v} for d, v in sorted((common or {}).items())]


def loss_curves_svg(curves: Mapping[str, Sequence[Mapping[str, float | None]]], *, title: str,
                    ylabel: str = "per-record loss ρ (PRzCDP)", key: str = "rho",
                    units: Mapping[str, str] | None = None) -> str:
    """Log-log plot of per-record privacy loss curves against record size Δ.

    Record sizes in different units of measure (dollars of payroll, employees, rows of a count)
    are never put on one axis: with ``units``, each unit gets a panel of its own. Curves with
    exactly the same points are drawn once, with their labels joined in the legend, so no
    series hides behind another.

    Args:
        curves: Label → rows ``{"delta": record size Δ, "rho": ..., "epsilon": ...}`` (any
            extra keys allowed). Rows with Δ ≤ 0, or a value that is missing, ``None``,
            infinite or ≤ 0, are skipped (a log axis cannot show them). A curve labelled
            ``"total"`` is drawn thick and black, after the others.
        title: Plot title.
        ylabel: Label of the y axis.
        key: Which value of the rows to plot (``"rho"``, ``"epsilon"``, ``"epsilon_delta"``...).
        units: Label → unit of measure of its record sizes (e.g. ``"payroll"``, ``"rows"``).
            One panel per unit, in order of first appearance. A given ``"total"`` curve is
            drawn only when there is one panel; with several, each panel with more than one
            curve gets the total of its own curves (losses are never added across units).

    Returns:
        An ``<svg ...>...</svg>`` string.

    Example:
        >>> rows = [{"delta": d, "rho": 0.01 * d ** 0.5, "epsilon": None} for d in (0, 1, 10, 100)]
        >>> svg = loss_curves_svg({"t1": rows, "total": rows}, title="Loss")
        >>> svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
        True
        >>> svg == loss_curves_svg({"t1": rows, "total": rows}, title="Loss")
        True
        >>> svg = loss_curves_svg({"pay": rows, "staff": rows, "n": rows}, title="Loss",
        ...                       units={"pay": "payroll", "staff": "employment", "n": "rows"})
        >>> "record size Δ (payroll)" in svg and "record size Δ (rows)" in svg
        True
    """
    with rc_context(_RC):
        return _to_svg(_loss_figure(curves, title, ylabel, key, units), "loss", title)


def _loss_figure(curves: Mapping[str, Sequence[Mapping[str, float | None]]], title: str,
                 ylabel: str, key: str, units: Mapping[str, str] | None) -> Figure:
    """The figure of `loss_curves_svg` (drawn under its rc settings)."""
    labels = [k for k in curves if k != "total"]
    groups = _by_unit(labels, units) or {None: []}
    fig, axes = _panel_figure(len(groups))
    colour = 0
    for ax, (unit, members) in zip(axes, groups.items(), strict=True):
        series: list[_Series] = []
        for label in members:
            rows = curves[label]
            x, y = _positive_pairs([r.get("delta") for r in rows],
                                   [r.get(key) for r in rows])
            if x.size:
                series.append((label, x, y))
        total: Sequence[Mapping[str, Any]] | None = None
        if len(groups) == 1:
            total = curves.get("total")
        elif len(members) > 1:
            total = _sum_curves([curves[m] for m in members], key)
        drawn = _merge_identical(series)
        if total:
            tx, ty = _positive_pairs([r.get("delta") for r in total],
                                     [r.get(key) for r in total])
            if tx.size:
                # a total equal to one drawn series (one table): one line, both labels
                same = [i for i, (_, x, y) in enumerate(drawn)
                        if np.array_equal(x, tx) and np.array_equal(y, ty)]
                if same:
                    label, _, _ = drawn.pop(same[0])
                    drawn.append((f"total = {label}", tx, ty))
                else:
                    drawn.append(("total", tx, ty))
        n = 0
        for label, x, y in drawn:
            if label == "total" or label.startswith("total = "):
                ax.plot(x, y, color=_TOTAL_COLOR, linewidth=3.0, marker="o",
                        markersize=4.5, label=_text(label), zorder=5)
            else:
                j = colour % len(PALETTE)   # colours run on across panels
                colour += 1
                ax.plot(x, y, color=PALETTE[j], linewidth=2.2, marker=_MARKERS[j],
                        markersize=4.5, label=_text(label), zorder=3)
            n += 1
        if n:
            _style_log_axes(ax)
            _legend(ax, n)
        else:
            _no_data(ax, "no positive losses to plot")
        ax.set_xlabel("record size Δ (largest contribution to one cell)" if unit is None
                      else _text(f"record size Δ ({unit})"))
        ax.set_ylabel(_text(ylabel))
        if unit is not None and len(groups) > 1:
            ax.set_title(_text(unit), fontsize=11)
    return _titled(fig, axes, title)


def moe_curves_svg(curves: Mapping[str, Sequence[Mapping[str, float]]], *, title: str,
                   cv_line: float | None = None, cv_label: str = "CV flag",
                   units: Mapping[str, str] | None = None,
                   cv_lines: Mapping[str, Sequence[Mapping[str, float]]] | None = None) -> str:
    """Relative margin of error (moe / total) against the true cell total, log-log.

    Cell totals in different units of measure (dollars, employees, counts) are never put on one
    axis: with ``units``, each unit gets a panel of its own. Curves with exactly the same points
    are drawn once, with their labels joined in the legend.

    Args:
        curves: Label → rows ``{"total": true cell total, "sd": ..., "moe": ...,
            "rel_moe": moe / total}``. ``rel_moe`` is computed from ``moe / total`` when
            missing; rows with total ≤ 0 or a non-positive / missing value are skipped.
        title: Plot title.
        cv_line: Optional reference level on the y axis (moe / total) drawn as a dashed
            horizontal line in every panel (ignored for the series ``cv_lines`` gives).
        cv_label: Text written on the ``cv_line`` line.
        units: Label → unit of measure of its cell totals (e.g. ``"payroll"``, ``"rows"``):
            one panel per unit, in order of first appearance.
        cv_lines: Label → rows ``{"total", "rel_moe", "cv_flag"}``: where that series' cells
            reach its table's CV flag threshold (``cv_flag`` times the moe / sd of the table's
            own mechanism, which depends on the noise law and, for transformations, on the
            total: see `tabdp.report.html.cv_flag_lines`), drawn dashed in the series' panel:
            a horizontal line where it is the same at every total, else a dashed curve.
            Identical thresholds in a panel are drawn once.

    Returns:
        An ``<svg ...>...</svg>`` string.

    Example:
        >>> rows = [{"total": t, "sd": 3.0, "moe": 5.0, "rel_moe": 5.0 / t} for t in (10, 100, 1e3)]
        >>> svg = moe_curves_svg({"county: payroll": rows}, title="Error", cv_line=0.3)
        >>> "CV flag" in svg
        True
    """
    with rc_context(_RC):
        return _to_svg(_moe_figure(curves, title, cv_line, cv_label, units, cv_lines), "moe",
                       title)


def _cv_thresholds(members: Sequence[str], cv_line: float | None, cv_label: str,
                   cv_lines: Mapping[str, Sequence[Mapping[str, float]]] | None
                   ) -> list[tuple[str, np.ndarray | None, np.ndarray]]:
    """The CV-flag thresholds of one panel's series: ``(label, x or None, y)``.

    ``x`` is ``None`` for a horizontal line (one ``y``). Series with the same threshold share
    one line, labelled with their names when the panel has several different ones.
    """
    lines: dict[bytes, tuple[list[str], float, np.ndarray | None, np.ndarray]] = {}
    for label in members:
        pts = (cv_lines or {}).get(label)
        if pts:
            x, y = _positive_pairs([p.get("total") for p in pts],
                                   [p.get("rel_moe") for p in pts])
            if not y.size:
                continue
            cv = _float(pts[0].get("cv_flag"))
            flat = bool(np.allclose(y, y[0], rtol=1e-6, atol=0.0))
            xs: np.ndarray | None = None if flat else x
            ys = y[:1] if flat else y
        elif cv_lines is None and cv_line is not None and cv_line > 0:
            cv, xs, ys = None, None, np.array([float(cv_line)])
        else:
            continue
        sig = (b"h" if xs is None else xs.tobytes()) + ys.tobytes() + repr(cv).encode()
        lines.setdefault(sig, ([], cv if cv is not None else math.nan, xs, ys))[0].append(label)
    out = []
    for names, cv, xs, ys in lines.values():
        text = cv_label if math.isnan(cv) else f"CV flag (cv = {cv:g})"
        if len(lines) > 1 and not math.isnan(cv):
            text = f"{', '.join(names)}: {text}"
        out.append((text, xs, ys))
    return out


def _moe_figure(curves: Mapping[str, Sequence[Mapping[str, float]]], title: str,
                cv_line: float | None, cv_label: str, units: Mapping[str, str] | None,
                cv_lines: Mapping[str, Sequence[Mapping[str, float]]] | None = None
                ) -> Figure:
    """The figure of `moe_curves_svg` (drawn under its rc settings)."""
    groups = _by_unit(list(curves), units) or {None: []}
    cv = _float(cv_line)
    fig, axes = _panel_figure(len(groups))
    colour = 0
    for ax, (unit, members) in zip(axes, groups.items(), strict=True):
        series: list[_Series] = []
        for label in members:
            rows = curves[label]
            rel = []
            for r in rows:
                v = r.get("rel_moe")
                if v is None:
                    t, m = _float(r.get("total")), _float(r.get("moe"))
                    v = m / t if t and m is not None else None
                rel.append(v)
            x, y = _positive_pairs([r.get("total") for r in rows], rel)
            if x.size:
                series.append((label, x, y))
        drawn = _merge_identical(series)
        for label, x, y in drawn:
            j = colour % len(PALETTE)   # colours run on across panels
            colour += 1
            ax.plot(x, y, color=PALETTE[j], linewidth=2.2, marker=_MARKERS[j],
                    markersize=4.5, label=_text(label), zorder=3)
        if drawn:
            _style_log_axes(ax)
            for i, (text, xs, ys) in enumerate(_cv_thresholds(members, cv, cv_label,
                                                               cv_lines)):
                if xs is None:
                    ax.axhline(ys[0], color="#444444", linestyle="--", linewidth=1.2, zorder=2)
                else:
                    ax.plot(xs, ys, color="#444444", linestyle="--", linewidth=1.2, zorder=2)
                # labels alternate between the right and the left end of their lines
                right = i % 2 == 0
                at_y = float(ys[-1] if right else ys[0])
                ax.annotate(_text(text), xy=(1.0 if right else 0.0, at_y),
                            xycoords=("axes fraction", "data"), xytext=(-4 if right else 4, 4),
                            textcoords="offset points", ha="right" if right else "left",
                            va="bottom", color="#333333", fontsize=9, zorder=6,
                            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none",
                                  "alpha": 0.85})
            _legend(ax, len(drawn))
        else:
            _no_data(ax, "no expected-error rows to plot")
        ax.set_xlabel("true cell total" if unit is None
                      else _text(f"true cell total ({unit})"))
        ax.set_ylabel("relative margin of error (moe / total)")
        if unit is not None and len(groups) > 1:
            ax.set_title(_text(unit), fontsize=11)
    return _titled(fig, axes, title)
