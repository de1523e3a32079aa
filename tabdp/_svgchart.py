"""The confidential report's figures, written as SVG directly (no matplotlib).

The histogram of the units' losses and the scatter of loss against size are drawn from the data
on every release, so their cost is part of every run's fixed cost; the public page's figures
follow from the plan alone and are cached on disk (`tabdp._figcache`). Drawing these two through
matplotlib took about 0.9 s of a 1,000-row ``tabdp run`` (constrained layout, then the SVG
backend) and importing matplotlib 0.3 s more (2026-12-06); written here they take a few
milliseconds and a release that finds its public figures cached imports no plotting library.
`tabdp.plotting` re-exports them (`histogram_svg`, `histogram_counts_svg`, `scatter_svg`).

The figures keep the look of the matplotlib ones (the ``tab10`` blue, DejaVu Sans, log axes
labelled ``10⁵``, a grid under the data, a legend placed where the data are not) and their
properties: a bare ``<svg>`` element (no XML header, no external reference), byte-identical for
the same input, element ids prefixed by the plot kind and a hash of its title (two plots of one
page with different titles never share an id), text kept as ``<text>`` (a title or label too
long for the figure is set smaller, and cut with "…" below 6 px), an accessible name
(``role="img"``, ``aria-label``, ``<title>``). A scatter's points are one embedded PNG layer
at 200 dpi (as matplotlib's ``rasterized=True``): each point a disc of 7 pt² at opacity 0.55,
overlapping discs composited exactly (``1 − Π(1 − 0.55·coverage)``).
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tabdp._histogram import histogram_bin_index, histogram_edges

__all__ = ["PALETTE", "histogram_svg", "histogram_counts_svg", "scatter_svg", "power_text"]

#: The colours of the report figures, in order (matplotlib's ``tab10``).
PALETTE: tuple[str, ...] = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)
_TOTAL_COLOR = "#000000"
_FONT = "'DejaVu Sans', 'Liberation Sans', 'Arial', 'Helvetica', sans-serif"
_TICK_COLOR = "#333333"
_SPINE_COLOR = "#555555"
_PAD = 5.0  # figure edge to text (pt)
_TICK = 3.5  # major tick length (pt); minor ticks 2
_DPI = 200.0  # the scatter's raster layer
_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def power_text(x: float) -> str:
    """A log-axis label as plain text: ``1e5`` → ``10⁵``, ``2e-7`` → ``2×10⁻⁷``.

    Args:
        x: The tick value.

    Returns:
        ``10ᵏ`` for a power of ten, the plain number for other values between 10⁻² and 10⁵,
        else two significant digits times a power of ten.

    Example:
        >>> power_text(1e5), power_text(2e-7), power_text(0.5)
        ('10⁵', '2×10⁻⁷', '0.5')
    """
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    exp = math.floor(math.log10(abs(x)) + 1e-9)
    mant = x / 10.0**exp
    if abs(mant - round(mant)) < 1e-6 and round(mant) == 1:
        return "10" + str(exp).translate(_SUPERSCRIPT)
    if -2 <= exp <= 4:
        return f"{x:g}"
    return f"{mant:.2g}×10" + str(exp).translate(_SUPERSCRIPT)


# -- text -----------------------------------------------------------------------------------------
_NARROW = frozenset("il.,:;|!'`ıj")
_MEDIUM = frozenset("frt()[]{}/\\- ")
_WIDE = frozenset("mwMW%@")


def _text_width(s: str, size: float, bold: bool = False) -> float:
    """Approximate advance width of ``s`` in DejaVu Sans at ``size`` pt (for the layout)."""
    em = 0.0
    for ch in s:
        if ch.isdigit():
            em += 0.64
        elif ch in _NARROW:
            em += 0.29
        elif ch in _MEDIUM:
            em += 0.37
        elif ch in _WIDE:
            em += 0.95
        elif ch in "⁰¹²³⁴⁵⁶⁷⁸⁹⁻":
            em += 0.40
        elif ch.isupper():
            em += 0.70
        else:
            em += 0.60
    return em * size * (1.08 if bold else 1.0)


def _f(v: float) -> str:
    """A coordinate, rounded to 0.01 pt (fixed text: the same input, the same bytes)."""
    s = f"{v:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _fit(s: str, size: float, room: float, bold: bool = False) -> tuple[str, float]:
    """``s`` and a font size at which it fits ``room`` pt: smaller, and below 6 px cut ("…")."""
    width = _text_width(s, size, bold)
    if width <= room or not s:
        return s, size
    small = size * room / width
    if small >= 6.0:
        return s, small
    lo, hi = 1, len(s)  # the longest start of s that fits with "…" (binary search)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _text_width(s[:mid] + "…", 6.0, bold) <= room:
            lo = mid
        else:
            hi = mid - 1
    return s[:lo].rstrip() + "…", 6.0


def _text(x: float, y: float, s: str, *, size: float = 10.0, anchor: str = "middle",
          color: str = _TICK_COLOR, bold: bool = False, rotate: bool = False) -> str:
    weight = "; font-weight: bold" if bold else ""
    turn = f' transform="rotate(-90 {_f(x)} {_f(y)})"' if rotate else ""
    return (f'<text x="{_f(x)}" y="{_f(y)}"{turn} style="font-size: {_f(size)}px; '
            f"font-family: {_FONT}; text-anchor: {anchor}; fill: {color}{weight}\">"
            f"{html.escape(s, quote=False)}</text>")


# -- scales and ticks -----------------------------------------------------------------------------
class _Scale:
    """Data → figure coordinate along one axis (linear or base-10 logarithmic)."""

    def __init__(self, lo: float, hi: float, log: bool) -> None:
        self.lo, self.hi, self.log = lo, hi, log
        self.a, self.b = 0.0, 1.0

    def place(self, a: float, b: float) -> None:
        self.a, self.b = a, b

    def _t(self, v: np.ndarray) -> np.ndarray:
        if self.log:
            lo, hi = math.log10(self.lo), math.log10(self.hi)
            with np.errstate(divide="ignore", invalid="ignore"):
                return (np.log10(v) - lo) / (hi - lo)
        # halved: no overflow on the widest spans, and the same doubles otherwise
        return (v / 2 - self.lo / 2) / (self.hi / 2 - self.lo / 2)

    def __call__(self, v: Any) -> Any:
        out = self.a + self._t(np.asarray(v, dtype=np.float64)) * (self.b - self.a)
        return float(out) if np.ndim(out) == 0 else out

    def inside(self, v: float) -> bool:
        tol = 1e-9 * (abs(self.hi) + abs(self.lo))
        return self.lo - tol <= v <= self.hi + tol


#: Exponents of the log axes' limits: ticks and limits stay finite, normal doubles (a value
#: beyond them, such as a subnormal loss, is drawn at the edge of the axes or off it).
_EXP_LO, _EXP_HI = -307.0, 308.25


def _limits(lo: float, hi: float, log: bool, margin: float = 0.05) -> tuple[float, float]:
    """Axis limits around ``[lo, hi]`` with a margin of ``margin`` of the span on each side.

    Finite for any finite input: log limits within 10^±308, linear limits within the doubles
    (a span below 1e-300, such as one of subnormals, widened to it).
    """
    if log:
        a = min(max(math.log10(lo), _EXP_LO), _EXP_HI)
        b = min(max(math.log10(hi), _EXP_LO), _EXP_HI)
        if b - a < 1e-12:
            a, b = a - 0.5, b + 0.5
        pad = margin * (b - a)
        return 10.0 ** max(a - pad, _EXP_LO - 1), 10.0 ** min(b + pad, _EXP_HI)
    scale = max(abs(lo), abs(hi))
    if scale == 0 or hi - lo <= 1e-12 * scale or hi - lo < 1e-300:
        half = max(scale * 0.05, 1e-300) if scale > 0 else 0.5
        lo, hi = lo - half, hi + half
    pad = margin * (hi / 2 - lo / 2) * 2 if math.isfinite(hi - lo) else margin * hi
    big = 1.7976931348623157e308
    return max(lo - pad, -big), min(hi + pad, big)


def _linear_ticks(lo: float, hi: float, target: int = 6) -> tuple[list[float], list[str]]:
    """Round ticks (steps of 1, 2, 2.5 or 5 × 10ᵏ) inside ``[lo, hi]``, and their labels."""
    raw = hi / target - lo / target  # (no overflow on the widest spans)
    if not (math.isfinite(raw) and raw > 1e-300):  # a span of subnormals: no round ticks
        return [], []
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * mag >= raw * (1 - 1e-9))
    first = math.ceil(lo / step - 1e-9)
    ticks = [float(f"{k * step:.12g}") for k in range(first, math.floor(hi / step + 1e-9) + 1)]
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    if abs(step / 10.0 ** math.floor(math.log10(step) + 1e-9) - 2.5) < 1e-9:
        decimals += 1
    top = max(abs(lo), abs(hi))
    powers = top >= 1e6 or top < 1e-3  # (round numbers of many digits: 10ᵏ notation)
    labels = [power_text(t).replace("-", "−", 1) if powers and t
              else f"{t:,.{decimals}f}".replace("-", "−") for t in ticks]
    return ticks, labels


def _log_ticks(lo: float, hi: float) -> tuple[list[float], list[str], list[float]]:
    """Labelled (major) ticks, their labels, and unlabelled (minor) ticks of a log axis.

    Powers of ten when at least two fall inside (every k-th decade beyond eight decades),
    else the multiples 1, 2 and 5 of powers of ten, else every multiple 1–9, else round
    linear ticks.
    """
    e0 = max(math.floor(math.log10(lo)) - 1, -307)
    e1 = min(math.ceil(math.log10(hi)) + 1, 308)
    inside = [e for e in range(e0, e1 + 1) if lo * (1 - 1e-9) <= 10.0**e <= hi * (1 + 1e-9)]
    if len(inside) >= 2:
        stride = max(1, math.ceil((inside[-1] - inside[0]) / 8))
        major = [10.0**e for e in inside if e % stride == 0]
        if len(major) < 2:
            major = [10.0**e for e in inside]
        if stride == 1:
            minor = [m * 10.0**e for e in range(e0, e1 + 1) for m in range(2, 10)
                     if lo <= m * 10.0**e <= hi]
        else:  # the decades between the labelled ones (not a solid band of lines)
            minor = [10.0**e for e in inside if e % stride] if len(inside) <= 40 else []
        return major, [power_text(t) for t in major], minor
    for mults in ((1, 2, 5), tuple(range(1, 10))):
        major = [m * 10.0**e for e in range(e0, e1 + 1) for m in mults
                 if lo * (1 - 1e-9) <= m * 10.0**e <= hi * (1 + 1e-9)]
        if len(major) >= 2:
            minor = [m * 10.0**e for e in range(e0, e1 + 1) for m in range(1, 10)
                     if lo <= m * 10.0**e <= hi and m * 10.0**e not in major]
            return major, [power_text(t) for t in major], minor
    ticks, _ = _linear_ticks(lo, hi, 4)
    ticks = [t for t in ticks if t > 0]
    return ticks, [power_text(t) for t in ticks], []


def _ticks(scale: _Scale) -> tuple[list[float], list[str], list[float]]:
    if scale.log:
        return _log_ticks(scale.lo, scale.hi)
    major, labels = _linear_ticks(scale.lo, scale.hi)
    return major, labels, []


# -- one figure with one axes ---------------------------------------------------------------------
class _Chart:
    """A figure with one axes: frame, grid, ticks, labels, a clipped data layer and a legend."""

    def __init__(self, kind: str, title: str, *, width: float, height: float) -> None:
        self.kind, self.title = kind, title
        self.w, self.h = width * 72.0, height * 72.0
        key = f"{kind}\x00{title}".encode()
        self.ids = f"{kind}-{hashlib.sha256(key).hexdigest()[:8]}"
        self.data: list[str] = []
        self.occupied: list[tuple[float, float, float, float]] = []  # data boxes (for the legend)
        self.box = (0.0, 0.0, self.w, self.h)

    def axes(self, x: _Scale | None, y: _Scale | None, xlabel: str, ylabel: str) -> None:
        """Lays out the axes box (``self.box``) around the tick labels and axis labels."""
        self.x, self.y, self.xlabel, self.ylabel = x, y, xlabel, ylabel
        self.xt = _ticks(x) if x is not None else ([], [], [])
        self.yt = _ticks(y) if y is not None else ([], [], [])
        top = _PAD + 11.5 * 1.25 + 4.0
        bottom = self.h - (_PAD + 12.0 + 4.0 + (12.0 + 2 * _TICK if self.xt[0] else 0.0))
        ytick_w = max((_text_width(s, 10.0) for s in self.yt[1]), default=0.0)
        left = _PAD + (12.0 + 4.0 if ylabel else 0.0) + (ytick_w + 2 * _TICK if self.yt[0]
                                                          else 0.0)
        right = self.w - _PAD - 3.0
        if x is not None and self.xt[0]:
            last = self.xt[1][-1]
            x.place(left, right)
            over = x(self.xt[0][-1]) + _text_width(last, 10.0) / 2 - (self.w - _PAD)
            right -= max(0.0, over)
        self.box = (left, top, right, bottom)
        if x is not None:
            x.place(left, right)
        if y is not None:
            y.place(bottom, top)

    def note(self, text: str, fy: float, size: float = 11.0, color: str = "#666666") -> None:
        """Centered text at height ``fy`` (0 = bottom, 1 = top of the axes), e.g. "no data"."""
        x0, y0, x1, y1 = self.box
        self.data.append(_text((x0 + x1) / 2, y1 - fy * (y1 - y0), text, size=size,
                               color=color))

    def legend(self, entries: Sequence[tuple[str, str]], title: str | None,
               title_size: float) -> str:
        """A legend box placed where the data are not (matplotlib's ``loc="best"``).

        ``entries``: (SVG of the handle drawn at (0, 0), label). The box is tried at the
        corners and the middles of the edges, in matplotlib's order, and the place covering the
        least data area is kept (the first on a tie).
        """
        lines = title.split("\n") if title else []
        w = max([_text_width(s, title_size) for s in lines]
                + [28.0 + _text_width(s, 9.0) for _, s in entries] + [0.0]) + 10.0
        h = 6.0 + len(lines) * title_size * 1.25 + len(entries) * 9.0 * 1.45 + 2.0
        x0, y0, x1, y1 = self.box
        m = 4.0
        places = [(x1 - m - w, y0 + m), (x0 + m, y0 + m), (x0 + m, y1 - m - h),
                  (x1 - m - w, y1 - m - h), (x1 - m - w, (y0 + y1 - h) / 2),
                  (x0 + m, (y0 + y1 - h) / 2), ((x0 + x1 - w) / 2, y1 - m - h),
                  ((x0 + x1 - w) / 2, y0 + m), ((x0 + x1 - w) / 2, (y0 + y1 - h) / 2)]

        def covered(px: float, py: float) -> float:
            area = 0.0
            for a, b, c, d in self.occupied:
                dx = min(c, px + w) - max(a, px)
                dy = min(d, py + h) - max(b, py)
                if dx > 0 and dy > 0:
                    area += dx * dy
            return area

        px, py = min(places, key=lambda p: covered(*p))
        out = [f'<g class="legend"><rect x="{_f(px)}" y="{_f(py)}" width="{_f(w)}" '
               f'height="{_f(h)}" rx="2" style="fill: #ffffff; fill-opacity: 0.92; stroke: '
               f'#cccccc; stroke-width: 0.8"/>']
        ty = py + 4.0
        for s in lines:
            ty += title_size * 1.25
            out.append(_text(px + w / 2, ty - title_size * 0.3, s, size=title_size,
                             color="#000000"))
        for handle, label in entries:
            ty += 9.0 * 1.45
            cy = ty - 9.0 * 0.45
            out.append(f'<g transform="translate({_f(px + 15.0)} {_f(cy)})">{handle}</g>')
            out.append(_text(px + 29.0, cy + 9.0 * 0.35, label, size=9.0, anchor="start",
                             color="#000000"))
        out.append("</g>")
        return "".join(out)

    def _axis_parts(self, grid: Sequence[tuple[str, str]]) -> tuple[list[str], list[str]]:
        """Grid lines (under the data) and ticks with labels (over it)."""
        x0, y0, x1, y1 = self.box
        under: list[str] = []
        over: list[str] = []
        for axis, scale, (major, labels, minor) in (("x", self.x, self.xt), ("y", self.y,
                                                                             self.yt)):
            if scale is None:
                continue
            for which, vals in (("minor", minor), ("major", major)):
                style = dict(grid).get(which)
                pos = [float(scale(v)) for v in vals if scale.inside(v)]
                if style is not None and pos:
                    color, width = style.split()
                    d = "".join(f"M{_f(p)} {_f(y0)}V{_f(y1)}" if axis == "x"
                                else f"M{_f(x0)} {_f(p)}H{_f(x1)}" for p in pos)
                    under.append(f'<path d="{d}" style="fill: none; stroke: {color}; '
                                 f'stroke-width: {width}"/>')
                length, lw = (_TICK, 0.8) if which == "major" else (2.0, 0.6)
                if pos:
                    d = "".join(f"M{_f(p)} {_f(y1)}v{_f(length)}" if axis == "x"
                                else f"M{_f(x0)} {_f(p)}h{_f(-length)}" for p in pos)
                    over.append(f'<path d="{d}" style="fill: none; stroke: {_TICK_COLOR}; '
                                f'stroke-width: {lw}"/>')
            for v, s in zip(major, labels, strict=True):
                if not scale.inside(v):
                    continue
                p = float(scale(v))
                if axis == "x":
                    over.append(_text(p, y1 + 2 * _TICK + 9.5, s))
                else:
                    over.append(_text(x0 - 2 * _TICK, p + 3.5, s, anchor="end"))
        return under, over

    def svg(self, grid: Sequence[tuple[str, str]] = (), legend: str = "") -> str:
        x0, y0, x1, y1 = self.box
        under, over = self._axis_parts(grid) if self.x is not None else ([], [])
        clip = f"{self.ids}-clip"
        head, head_size = _fit(self.title, 11.5, self.w - 2 * _PAD, bold=True)
        xlabel, xlabel_size = _fit(self.xlabel, 10.0, x1 - x0)
        title = html.escape(self.title, quote=False)
        parts = [f'<svg role="img" aria-label="{html.escape(self.title)}" '
                 f'xmlns="http://www.w3.org/2000/svg" '
                 f'xmlns:xlink="http://www.w3.org/1999/xlink" width="{_f(self.w)}pt" '
                 f'height="{_f(self.h)}pt" viewBox="0 0 {_f(self.w)} {_f(self.h)}" '
                 f'version="1.1">',
                 f"<title>{title}</title>",
                 f'<defs><clipPath id="{clip}"><rect x="{_f(x0)}" y="{_f(y0)}" '
                 f'width="{_f(x1 - x0)}" height="{_f(y1 - y0)}"/></clipPath></defs>',
                 f'<g id="{self.ids}-figure">',
                 f'<rect width="{_f(self.w)}" height="{_f(self.h)}" style="fill: #ffffff"/>',
                 *under,
                 f'<g clip-path="url(#{clip})">', *self.data, "</g>",
                 f'<rect x="{_f(x0)}" y="{_f(y0)}" width="{_f(x1 - x0)}" '
                 f'height="{_f(y1 - y0)}" style="fill: none; stroke: {_SPINE_COLOR}; '
                 f'stroke-width: 0.8"/>',
                 *over, legend,
                 _text(self.w / 2, _PAD + 11.5 * 0.95, head, size=head_size, color="#000000",
                       bold=True),
                 _text((x0 + x1) / 2, self.h - _PAD - 3.0, xlabel, size=xlabel_size,
                       color="#000000")]
        if self.ylabel:
            label, size = _fit(self.ylabel, 10.0, y1 - y0)
            parts.append(_text(_PAD + 9.5, (y0 + y1) / 2, label, size=size, color="#000000",
                               rotate=True))
        parts.append("</g></svg>")
        return "".join(parts)


# -- the histogram --------------------------------------------------------------------------------
def histogram_svg(values: np.ndarray, *, title: str, xlabel: str, log_x: bool = True) -> str:
    """Histogram of per-unit values (e.g. each unit's total ρ).

    Args:
        values: The values. Non-finite values are left out; with ``log_x`` so are values ≤ 0
            (the plot notes how many were left out).
        title: Plot title.
        xlabel: Label of the x axis.
        log_x: Logarithmic bins and x axis.

    Returns:
        An ``<svg ...>...</svg>`` string.

    Example:
        >>> import numpy as np
        >>> v = np.geomspace(0.01, 100.0, 500)
        >>> svg = histogram_svg(v, title="Losses", xlabel="ρ")
        >>> svg.count("<svg") == 1 and svg == histogram_svg(v, title="Losses", xlabel="ρ")
        True
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    finite = v[np.isfinite(v)]
    shown = finite[finite > 0] if log_x else finite
    left_out = int(v.size - shown.size)
    if shown.size == 0:
        return histogram_counts_svg(None, None, left_out=left_out, title=title, xlabel=xlabel,
                                    log_x=log_x)
    edges = histogram_edges(int(shown.size), float(shown.min()), float(shown.max()),
                            log_x=log_x)
    idx = histogram_bin_index(shown, edges)
    counts = np.bincount(idx[idx >= 0], minlength=edges.size - 1)
    return histogram_counts_svg(edges, counts, left_out=left_out, title=title, xlabel=xlabel,
                                log_x=log_x)


def histogram_counts_svg(edges: np.ndarray | None, counts: np.ndarray | None, *, left_out: int,
                         title: str, xlabel: str, log_x: bool = True) -> str:
    """The plot of `histogram_svg` from precomputed bins (e.g. counted by a Polars query).

    Args:
        edges: Bin edges (``nb + 1``, from [`histogram_edges`][tabdp.plotting.histogram_edges]), or
            None when no value is shown.
        counts: Number of values in each bin (``nb``;
            [`histogram_bin_index`][tabdp.plotting.histogram_bin_index]), or None.
        left_out: Number of values not shown (non-finite; with ``log_x`` also ≤ 0).
        title: Plot title.
        xlabel: Label of the x axis.
        log_x: Logarithmic x axis.

    Returns:
        An ``<svg ...>...</svg>`` string, identical to
        [`histogram_svg`][tabdp.plotting.histogram_svg] of values with these counts. The
        vertical axis (number of units) is logarithmic.

    Example:
        >>> import numpy as np
        >>> v = np.geomspace(0.01, 100.0, 500)
        >>> e = histogram_edges(v.size, 0.01, 100.0)
        >>> c = np.bincount(histogram_bin_index(v, e), minlength=e.size - 1)
        >>> svg = histogram_counts_svg(e, c, left_out=0, title="Losses", xlabel="ρ")
        >>> svg == histogram_svg(v, title="Losses", xlabel="ρ")
        True
    """
    shown = edges is not None and counts is not None and int(np.sum(counts)) > 0
    chart = _Chart("hist", title, width=7.2, height=3.8)
    note = None
    if left_out:
        what = "non-finite or ≤ 0" if log_x else "non-finite"
        note = f"{left_out:,} value(s) {what} not shown"
    if not shown:
        chart.axes(None, None, xlabel, "")
        chart.note("no positive values to plot" if log_x else "no values to plot", 0.5)
        if note:
            chart.note(note, 0.4 - 9.0 / (chart.box[3] - chart.box[1]), size=9.0,
                       color="#555555")
        return chart.svg()
    e = np.asarray(edges, dtype=np.float64)
    c = np.asarray(counts, dtype=np.float64)
    x = _Scale(*_limits(float(e[0]), float(e[-1]), log_x), log_x)
    # counts: from below the smallest to at least 10 (whole-number ticks: 10⁰, 10¹, ...)
    y = _Scale(*_limits(max(float(c[c > 0].min()), 1.0) / 1.6, max(float(c.max()), 10.0), True),
               True)
    chart.axes(x, y, xlabel, "number of units (log scale)")
    bottom = chart.box[3]
    xs, ys = x(e), y(np.where(c > 0, c, np.nan))
    bars = []
    for i in np.flatnonzero(c > 0):
        a, b, top = float(xs[i]), float(xs[i + 1]), float(ys[i])
        if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(top)):
            continue
        bars.append(f"M{_f(a)} {_f(bottom)}V{_f(top)}H{_f(b)}V{_f(bottom)}Z")
        chart.occupied.append((a, top, b, bottom))
    chart.data.append(f'<path d="{"".join(bars)}" style="fill: {PALETTE[0]}; stroke: #ffffff; '
                      f'stroke-width: 0.4"/>')
    legend = chart.legend([], note, 9.0) if note else ""
    return chart.svg(grid=[("major", "#e0e0e0 0.7")], legend=legend)


# -- the scatter ----------------------------------------------------------------------------------
def _subsample(y: np.ndarray, max_points: int) -> np.ndarray:
    """Indices of at most ``max_points`` points: the largest y, then evenly spaced by rank."""
    n = y.size
    if n <= max_points:
        return np.arange(n)
    order = np.argsort(y, kind="stable")
    k_top = max(1, min(max_points // 10, max_points))
    top = order[n - k_top:]
    rest = order[: n - k_top]
    k_rest = max_points - k_top
    if k_rest > 0 and rest.size:
        pick = np.unique(np.linspace(0, rest.size - 1, k_rest).round().astype(np.int64))
        chosen = np.concatenate([rest[pick], top])
    else:
        chosen = top
    return np.sort(chosen)


def _png(rgba: np.ndarray) -> bytes:
    """A PNG file of an ``(h, w, 4)`` uint8 RGBA image (no filter, zlib level 6)."""
    h, w, _ = rgba.shape
    raw = np.zeros((h, 1 + 4 * w), dtype=np.uint8)  # each row: filter byte 0, then pixels
    raw[:, 1:] = rgba.reshape(h, 4 * w)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw.tobytes(), 6)) + chunk(b"IEND", b""))


def _disc_kernel(radius: float, sub: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Offsets (dy, dx) and coverage in (0, 1] of the pixels a disc centred on a pixel covers."""
    r = math.ceil(radius + 0.5)
    off = np.arange(-r, r + 1)
    s = (np.arange(sub) + 0.5) / sub - 0.5
    yy = off[:, None, None, None] + s[None, None, :, None]
    xx = off[None, :, None, None] + s[None, None, None, :]
    cover = ((yy**2 + xx**2) <= radius**2).mean(axis=(2, 3))
    dy, dx = np.nonzero(cover)
    return dy - r, dx - r, cover[dy, dx]


def _points_layer(px: np.ndarray, py: np.ndarray, box: tuple[float, float, float, float],
                  color: str, area_pt2: float, alpha: float) -> str:
    """The points as one PNG ``<image>`` over ``box``: discs of ``area_pt2`` at ``alpha``."""
    x0, y0, x1, y1 = box
    k = _DPI / 72.0
    w, h = max(1, round((x1 - x0) * k)), max(1, round((y1 - y0) * k))
    radius = math.sqrt(area_pt2) / 2 * k
    dy, dx, cover = _disc_kernel(radius)
    r = int(max(abs(dy).max(), abs(dx).max()))
    pad = 2 * r + 1
    W, H = w + 2 * pad, h + 2 * pad
    with np.errstate(invalid="ignore", over="ignore"):
        fx, fy = np.floor((px - x0) * k), np.floor((py - y0) * k)
    # only the points whose discs can reach the axes (the others are clipped off anyway)
    near = (fx >= -r) & (fx <= w - 1 + r) & (fy >= -r) & (fy <= h - 1 + r)
    ix = fx[near].astype(np.int64) + pad
    iy = fy[near].astype(np.int64) + pad
    centre = iy * W + ix
    flat = (centre[:, None] + (dy * W + dx)[None, :]).reshape(-1)
    weight = np.broadcast_to(np.log1p(-alpha * cover)[None, :], (centre.size, cover.size))
    acc = np.bincount(flat, weights=weight.reshape(-1), minlength=W * H).reshape(H, W)
    a = 1.0 - np.exp(acc[pad:pad + h, pad:pad + w])
    rgba = np.empty((h, w, 4), dtype=np.uint8)
    rgba[..., 0], rgba[..., 1], rgba[..., 2] = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    rgba[..., 3] = np.rint(a * 255.0).astype(np.uint8)
    data = base64.b64encode(_png(rgba)).decode("ascii")
    return (f'<image x="{_f(x0)}" y="{_f(y0)}" width="{_f(x1 - x0)}" height="{_f(y1 - y0)}" '
            f'preserveAspectRatio="none" xlink:href="data:image/png;base64,{data}"/>')


def _positive_pairs(x: Sequence[Any], y: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Points with finite x > 0 and y > 0 (None counts as missing), sorted by x."""
    xs, ys = [], []
    for a, b in zip(x, y, strict=True):
        fa, fb = _float(a), _float(b)
        if fa is not None and fb is not None and fa > 0 and fb > 0:
            xs.append(fa)
            ys.append(fb)
    xa, ya = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
    order = np.argsort(xa, kind="stable")
    return xa[order], ya[order]


def _float(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _occupy(chart: _Chart, px: np.ndarray, py: np.ndarray, r: float) -> None:
    """Marks where points are (for the legend's place), merged on a grid of 6-pt squares."""
    if not px.size:
        return
    cells = np.unique(np.stack([np.floor(px / 6.0), np.floor(py / 6.0)], axis=1), axis=0)
    for cx, cy in cells.tolist():
        chart.occupied.append((cx * 6.0 - r, cy * 6.0 - r, cx * 6.0 + 6.0 + r,
                               cy * 6.0 + 6.0 + r))


def scatter_svg(x: np.ndarray, y: np.ndarray, *, title: str, xlabel: str, ylabel: str,
                curve: Sequence[Mapping[str, float | None]] | None = None,
                max_points: int = 20000, n_total: int | None = None) -> str:
    """Log-log scatter of per-unit values, with an optional public policy curve on top.

    Args:
        x: Per-unit x values (e.g. size). Points with x ≤ 0, y ≤ 0 or a non-finite value are
            dropped.
        y: Per-unit y values (e.g. total ρ).
        title: Plot title.
        xlabel: Label of the x axis.
        ylabel: Label of the y axis.
        curve: Optional rows ``{"delta": ..., "rho": ...}`` (the public total policy curve),
            drawn as a black line: a unit's point lies on or below it.
        max_points: Largest number of points drawn. Beyond it a deterministic subsample is
            drawn: the ``max_points // 10`` points of largest y, and points evenly spaced in the
            rank order of y among the others (the plot says so).
        n_total: When ``x`` and ``y`` are already a sample: the number of units it was drawn
            from (units with positive finite x and y); the plot then says "a systematic sample
            of N of M units".

    Returns:
        An ``<svg ...>...</svg>`` string.

    Raises:
        ValueError: If ``x`` and ``y`` differ in length.

    Example:
        >>> import numpy as np
        >>> s = np.geomspace(1.0, 1e6, 200)
        >>> curve = [{"delta": d, "rho": 0.1 * np.log1p(d) ** 2} for d in (1.0, 1e3, 1e6)]
        >>> svg = scatter_svg(s, 0.05 * np.log1p(s) ** 2, title="ρ vs size", xlabel="size",
        ...                   ylabel="ρ", curve=curve, max_points=50)
        >>> "50 of 200 units shown" in svg
        True
    """
    xa = np.asarray(x, dtype=np.float64).reshape(-1)
    ya = np.asarray(y, dtype=np.float64).reshape(-1)
    if xa.shape != ya.shape:
        raise ValueError(f"scatter_svg: x and y must have the same length; got {xa.size} and "
                         f"{ya.size}.")
    ok = np.isfinite(xa) & np.isfinite(ya) & (xa > 0) & (ya > 0)
    xa, ya = xa[ok], ya[ok]
    idx = _subsample(ya, max(int(max_points), 1))
    cx, cy = (_positive_pairs([r.get("delta") for r in curve], [r.get("rho") for r in curve])
              if curve else (np.zeros(0), np.zeros(0)))
    chart = _Chart("scatter", title, width=7.2, height=4.2)
    if not (xa.size or cx.size):
        chart.axes(None, None, xlabel, ylabel)
        chart.note("no units with positive size and loss", 0.5)
        return chart.svg()
    allx = np.concatenate([xa[idx], cx])
    ally = np.concatenate([ya[idx], cy])
    xs = _Scale(*_limits(float(allx.min()), float(allx.max()), True), True)
    ys = _Scale(*_limits(float(ally.min()), float(ally.max()), True), True)
    chart.axes(xs, ys, xlabel, ylabel)
    entries: list[tuple[str, str]] = []
    dot = math.sqrt(7.0) / 2  # radius (pt) of a point of area 7 pt²
    if xa.size:
        px, py = xs(xa[idx]), ys(ya[idx])
        chart.data.append(_points_layer(px, py, chart.box, PALETTE[0], 7.0, 0.55))
        _occupy(chart, px, py, dot)
        entries.append((f'<circle r="{_f(dot * 2.5)}" style="fill: {PALETTE[0]}; '
                        'fill-opacity: 0.55"/>', "units"))
    if cx.size:
        qx, qy = xs(cx), ys(cy)
        d = "M" + "L".join(f"{_f(a)} {_f(b)}" for a, b in zip(qx.tolist(), qy.tolist(),
                                                               strict=True))
        chart.data.append(f'<path d="{d}" style="fill: none; stroke: {_TOTAL_COLOR}; '
                          'stroke-width: 2.4; stroke-linejoin: round; stroke-linecap: round"/>')
        chart.data.append("".join(f'<circle cx="{_f(a)}" cy="{_f(b)}" r="2" '
                                  f'style="fill: {_TOTAL_COLOR}"/>'
                                  for a, b in zip(qx.tolist(), qy.tolist(), strict=True)))
        steps = np.linspace(0.0, 1.0, 24)
        for i in range(qx.size - 1):  # the line's course, for the legend's place
            _occupy(chart, qx[i] + steps * (qx[i + 1] - qx[i]),
                    qy[i] + steps * (qy[i + 1] - qy[i]), 1.2)
        _occupy(chart, qx[:1], qy[:1], 2.0)
        entries.append(('<path d="M-10 0H10" style="stroke: #000000; stroke-width: 2.4"/>'
                        f'<circle r="5" style="fill: {_TOTAL_COLOR}"/>',
                        "public total policy curve"))
    note = (f"{idx.size:,} of {xa.size:,} units shown:\nthe largest values and an even "
            "spread of the others" if idx.size < xa.size else None)
    if n_total is not None and n_total > idx.size:
        note = (f"a systematic sample of {idx.size:,} of {n_total:,} units:\nthe "
                "largest values and every k-th other unit")
    legend = chart.legend(entries, note, 8.5)
    return chart.svg(grid=[("minor", "#eeeeee 0.5"), ("major", "#d9d9d9 0.8")], legend=legend)

