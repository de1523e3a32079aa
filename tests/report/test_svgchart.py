"""The report figures drawn and cached without matplotlib.

The confidential page's figures are written as SVG directly (tabdp._svgchart); the public page's
cached figures are looked up without importing matplotlib (tabdp._figcache).
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from tabdp import _svgchart as S
from tabdp._histogram import histogram_bin_index, histogram_edges

ROOT = Path(__file__).resolve().parents[2]


# -- ticks ----------------------------------------------------------------------------------------
def test_log_ticks_are_powers_of_ten_then_multiples() -> None:
    major, labels, minor = S._log_ticks(0.005, 300.0)
    assert major == [0.01, 0.1, 1.0, 10.0, 100.0]
    assert labels == ["10⁻²", "10⁻¹", "10⁰", "10¹", "10²"]
    assert 0.02 in minor and 200.0 in minor and 0.01 not in minor and 400.0 not in minor
    # beyond eight decades: every k-th decade labelled, the others minor
    major, labels, minor = S._log_ticks(1.0, 1e20)
    assert major == [10.0**e for e in range(0, 21, 3)] and 10.0 in minor
    # within one decade: 1, 2, 5 multiples; within a factor 2: every multiple
    assert S._log_ticks(1.5, 12.0)[0] == [2.0, 5.0, 10.0]
    assert S._log_ticks(3.1, 4.9)[:2] == ([3.5, 4.0, 4.5], ["3.5", "4", "4.5"])  # linear
    major = S._log_ticks(3.1, 3.3)[0]
    assert len(major) >= 2 and all(3.1 <= t <= 3.3 for t in major)


def test_linear_ticks_are_round_steps() -> None:
    assert S._linear_ticks(-0.4, 10.4) == ([0.0, 2.0, 4.0, 6.0, 8.0, 10.0],
                                           ["0", "2", "4", "6", "8", "10"])
    ticks, labels = S._linear_ticks(0.0, 1.0)
    assert ticks == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert labels == ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]
    assert S._linear_ticks(0.0, 15.0)[1] == ["0.0", "2.5", "5.0", "7.5", "10.0", "12.5", "15.0"]
    assert S._linear_ticks(0.0, 3e6)[1][1:3] == ["5×10⁵", "10⁶"]
    assert S._linear_ticks(-3.0, 3.0)[1][0] == "−3"


def test_power_text() -> None:
    assert [S.power_text(x) for x in (1e5, 2e-7, 0.5, 1e-2, 300.0, 2e6)] == [
        "10⁵", "2×10⁻⁷", "0.5", "10⁻²", "300", "2×10⁶"]


# -- the histogram --------------------------------------------------------------------------------
def _bars(svg: str) -> list[tuple[float, float, float, float]]:
    """(left, top, right, bottom) of each bar of a histogram's bar path."""
    (d,) = re.findall(r'<path d="([^"]+)" style="fill: #1f77b4', svg)
    out = []
    for m in re.finditer(r"M([\d.]+) ([\d.]+)V([\d.]+)H([\d.]+)V([\d.]+)Z", d):
        a, bottom, top, b, bottom2 = map(float, m.groups())
        assert bottom == bottom2
        out.append((a, top, b, bottom))
    return out


def test_histogram_draws_one_bar_per_nonempty_bin_with_log_heights() -> None:
    counts = np.array([1, 0, 10, 100, 3])
    edges = np.geomspace(1.0, 1e5, 6)
    svg = S.histogram_counts_svg(edges, counts, left_out=0, title="h", xlabel="x")
    bars = _bars(svg)
    assert len(bars) == 4  # the empty bin is not drawn
    # log-scaled heights: 1 -> 10 -> 100 rise by equal steps
    h = [b[3] - b[1] for b in bars]
    assert h[2] - h[1] == pytest.approx(h[1] - h[0], abs=0.02)
    # equal widths on the log x axis (geometric bins), adjacent where bins are
    w = [b[2] - b[0] for b in bars]
    assert max(w) - min(w) < 0.02
    assert bars[1][0] == pytest.approx(bars[0][2] + w[0], abs=0.02)
    assert "not shown" not in svg
    svg = S.histogram_counts_svg(edges, counts, left_out=1234, title="h", xlabel="x")
    assert "1,234 value(s) non-finite or ≤ 0 not shown" in svg


def test_histogram_of_values_equals_the_counted_one() -> None:
    rng = np.random.default_rng(3)
    v = np.concatenate([rng.lognormal(0.0, 2.0, 400), [0.0, -1.0, np.inf, np.nan]])
    shown = v[np.isfinite(v) & (v > 0)]
    e = histogram_edges(shown.size, float(shown.min()), float(shown.max()))
    c = np.bincount(histogram_bin_index(shown, e), minlength=e.size - 1)
    assert S.histogram_svg(v, title="t", xlabel="x") == S.histogram_counts_svg(
        e, c, left_out=4, title="t", xlabel="x")
    assert sum(1 for _ in _bars(S.histogram_svg(v, title="t", xlabel="x"))) == int(
        np.count_nonzero(c))


def test_empty_histograms_say_so() -> None:
    svg = S.histogram_svg(np.array([0.0, -2.0]), title="t", xlabel="x")
    assert "no positive values to plot" in svg and "2 value(s) non-finite or ≤ 0" in svg
    svg = S.histogram_svg(np.array([np.nan]), title="t", xlabel="x", log_x=False)
    assert "no values to plot" in svg and "1 value(s) non-finite not shown" in svg
    lin = S.histogram_svg(np.array([-3.0, 0.0, 4.0]), title="t", xlabel="x", log_x=False)
    assert len(_bars(lin)) == 3 and ">0<" in lin  # a linear axis through 0


# -- the scatter ----------------------------------------------------------------------------------
def _png_alpha(svg: str) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    """The alpha channel of the scatter's PNG layer, and where it is placed (x, y, w, h)."""
    m = re.search(r'<image x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)" '
                  r'preserveAspectRatio="none" xlink:href="data:image/png;base64,([^"]+)"', svg)
    assert m is not None
    png = base64.b64decode(m.group(5))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert png[24:29] == bytes([8, 6, 0, 0, 0])  # 8-bit RGBA, no interlace
    pos, idat = 8, b""
    while pos < len(png):  # chunks: length, tag, data, CRC (checked)
        n = int.from_bytes(png[pos:pos + 4], "big")
        tag, data = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + n]
        assert int.from_bytes(png[pos + 8 + n:pos + 12 + n], "big") == zlib.crc32(tag + data)
        idat += data if tag == b"IDAT" else b""
        pos += 12 + n
    rows = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(h, 1 + 4 * w)
    assert not rows[:, 0].any()  # filter 0 on every row
    rgba = rows[:, 1:].reshape(h, w, 4)
    assert (rgba[..., :3] == [0x1F, 0x77, 0xB4]).all()
    return rgba[..., 3], tuple(float(m.group(i)) for i in range(1, 5))  # type: ignore[return-value]


def test_scatter_points_are_discs_composited_exactly() -> None:
    # one point alone, three points on one spot, far apart on a log-log plot
    x = np.array([1.0, 1e4, 1e4, 1e4])
    y = np.array([1.0, 1e2, 1e2, 1e2])
    svg = S.scatter_svg(x, y, title="t", xlabel="x", ylabel="y")
    alpha, (_, _, w_pt, _) = _png_alpha(svg)
    k = alpha.shape[1] / w_pt
    assert k == pytest.approx(200 / 72, rel=0.01)  # 200 dpi
    peak_one = alpha[alpha.shape[0] // 2:, : alpha.shape[1] // 2].max()
    peak_three = alpha.max()
    assert peak_one == round(255 * 0.55)
    assert peak_three == round(255 * (1 - 0.45**3))
    # a disc of 7 pt² each: the lone point covers about its area in pixels
    covered = np.count_nonzero(alpha[alpha.shape[0] // 2:, : alpha.shape[1] // 2])
    assert covered == pytest.approx(7.0 * k * k, rel=0.25)
    assert "units shown" not in svg


def test_scatter_draws_the_curve_and_places_the_legend_off_the_data() -> None:
    rng = np.random.default_rng(1)
    s = 10 ** rng.uniform(0, 6, 3000)
    r = 0.01 * np.log1p(s) ** 2
    curve = [{"delta": d, "rho": 0.012 * math.log1p(d) ** 2} for d in (1.0, 1e2, 1e4, 1e6)]
    svg = S.scatter_svg(s, r, title="t", xlabel="x", ylabel="y", curve=curve)
    assert svg.count('<circle cx="') == 4 and "public total policy curve" in svg
    # the data rise from lower left to upper right: the legend goes to the upper left
    box = re.search(r'<g class="legend"><rect x="([\d.]+)" y="([\d.]+)"', svg)
    clip = re.search(r'<clipPath id="[^"]+"><rect x="([\d.]+)" y="([\d.]+)" '
                     r'width="([\d.]+)" height="([\d.]+)"', svg)
    assert box is not None and clip is not None
    lx, ly = float(box.group(1)), float(box.group(2))
    x0, y0, w, h = (float(clip.group(i)) for i in range(1, 5))
    assert lx < x0 + w / 3 and ly < y0 + h / 3
    # mirrored data (falling): the legend moves to the upper right
    svg = S.scatter_svg(s, 1.0 / r, title="t", xlabel="x", ylabel="y")
    box = re.search(r'<g class="legend"><rect x="([\d.]+)" y="([\d.]+)"', svg)
    assert box is not None and float(box.group(1)) > x0 + w / 2


def test_scatter_subsample_notes_and_bad_points() -> None:
    x = np.arange(1, 5001, dtype=float)
    y = np.linspace(1.0, 2.0, 5000)
    svg = S.scatter_svg(x, y, title="t", xlabel="x", ylabel="y", max_points=500)
    assert "500 of 5,000 units shown:" in svg
    svg = S.scatter_svg(x[:100], y[:100], title="t", xlabel="x", ylabel="y", n_total=70_000)
    assert "a systematic sample of 100 of 70,000 units:" in svg
    none = S.scatter_svg(np.array([0.0, -1.0, np.nan]), np.array([1.0, 1.0, 1.0]), title="t",
                         xlabel="x", ylabel="y")
    assert "no units with positive size and loss" in none and "<image" not in none
    with pytest.raises(ValueError, match="same length"):
        S.scatter_svg(np.ones(3), np.ones(2), title="t", xlabel="x", ylabel="y")


def test_figures_are_bare_deterministic_svg_with_their_own_ids() -> None:
    v = np.geomspace(1e-3, 10.0, 300)
    for make in (lambda t: S.histogram_svg(v, title=t, xlabel="ρ <b>"),
                 lambda t: S.scatter_svg(v, v**2, title=t, xlabel="x", ylabel="y")):
        a, b = make("one & two"), make("three")
        assert a.startswith("<svg") and a.endswith("</svg>") and a == make("one & two")
        assert "<?xml" not in a and "DOCTYPE" not in a and "http://" not in a.replace(
            'xmlns="http://www.w3.org/2000/svg"', "").replace(
            'xmlns:xlink="http://www.w3.org/1999/xlink"', "")
        assert 'aria-label="one &amp; two"' in a and "<title>one &amp; two</title>" in a
        ids_a = set(re.findall(r'id="([^"]+)"', a))
        assert ids_a and not ids_a & set(re.findall(r'id="([^"]+)"', b))
    assert "ρ &lt;b&gt;" in S.histogram_svg(v, title="t", xlabel="ρ <b>")


_TEXT = re.compile(r'<text x="([-\d.]+)" y="([-\d.]+)"( transform="rotate[^"]*")? '
                   r'style="font-size: ([\d.]+)px;[^"]*text-anchor: (\w+)[^"]*?(; font-weight: '
                   r'bold)?">([^<]*)</text>')


@pytest.mark.parametrize("words", [1, 40, 20_000])
def test_the_axes_leave_room_for_their_labels(words: int) -> None:
    """Every text (ticks, labels, title) stays inside the figure, whatever its length."""
    import html as _html

    for lo, hi in ((1e-12, 1e-9), (1.0, 1e15), (0.5, 2.0), (-3e7, 4e9)):
        log = lo > 0
        title, xl, yl = ("title " * words).strip(), ("x label " * words), ("y label " * words)
        svg = (S.scatter_svg(np.array([lo, hi]), np.array([hi, lo]), title=title, xlabel=xl,
                             ylabel=yl) if log else
               S.histogram_svg(np.array([lo, hi]), title=title, xlabel=xl, log_x=False))
        width, height = (float(v) for v in re.search(  # type: ignore[union-attr]
            r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg).groups())
        texts = _TEXT.findall(svg)
        assert len(texts) >= 6
        for x, y, turn, size, anchor, bold, text in texts:
            w = S._text_width(_html.unescape(text), float(size), bool(bold))
            c = float(y) if turn else float(x)  # a turned text runs along y
            start = {"middle": c - w / 2, "end": c - w, "start": c}[anchor]
            room = height if turn else width
            assert start >= -1e-6 and start + w <= room + 1e-6, (text[:20], size, x, y)
            assert float(size) >= 6.0


_BIG = 1.7976931348623157e308  # the largest double


@pytest.mark.parametrize("values, log_x", [
    ([-1.7e308, 1.7e308], False), ([1e-20, 2e-20, 3e-20], False), ([5e-324, 1e-310, 1.0], True),
    ([1e-300, 1e300, 1.7e308], True), ([3.0], True), ([0.0, 0.0], False),
    ([5e-324, 1e-323], False), ([0.0, 1e-320], False), ([_BIG], True), ([_BIG], False),
    ([5e-324, _BIG], True), ([-_BIG, -_BIG / 2], False)])
def test_extreme_values_draw_finite_figures(values: list[float], log_x: bool) -> None:
    """Subnormal, huge and coinciding values: a drawn figure, finite coordinates only.

    (The project's warnings are errors: no overflow warning either.)
    """
    svg = S.histogram_svg(np.array(values), title="t", xlabel="x", log_x=log_x)
    assert "nan" not in svg.lower() and "inf" not in svg.lower()
    assert len(_bars(svg)) >= 1
    v = np.array(values)
    svg = S.scatter_svg(np.abs(v) + 5e-324, np.abs(v[::-1]) + 5e-324, title="t", xlabel="x",
                        ylabel="y")
    assert "nan" not in svg.lower() and "inf" not in svg.lower() and "<image" in svg


def test_the_confidential_page_draws_extreme_losses() -> None:
    import polars as pl

    from tabdp.report.html import render_confidential_html

    per = pl.DataFrame({"estab_id": [1, 2, 3], "rho": [5e-324, 1e-310, 1e300],
                        "epsilon": [float("inf")] * 3, "size": [1.0, 10.0, 1e300]})
    page = render_confidential_html({"release": {"name": "demo"}, "unit": "estab_id",
                                     "per_record": per, "top_n": 5})
    assert 'id="plot-loss-size"' in page and 'id="plot-loss-hist"' in page


# -- no matplotlib in a release whose public figures are cached --------------------------------
_CHILD = """
import json, sys
from tabdp._figcache import public_svg
from tabdp._svgchart import histogram_svg, scatter_svg
import numpy as np
rows = [{"delta": 1.0, "rho": 0.1}, {"delta": 10.0, "rho": 0.5}]
moe = [{"total": t, "sd": 3.0, "moe": 5.0} for t in (10.0, 100.0)]
svgs, imported = [], []
for f, a, k in (("loss_curves_svg", {"t": rows}, {"title": "L"}),
                ("loss_curves_svg", {"t": rows}, {"title": "E", "key": "rho"}),
                ("moe_curves_svg", {"t: x": moe}, {"title": "M"})):
    svgs.append(public_svg(f, a, **k))
    imported.append("matplotlib" in sys.modules)
histogram_svg(np.geomspace(1, 10, 50), title="h", xlabel="x")
scatter_svg(np.geomspace(1, 10, 50), np.geomspace(1, 10, 50), title="s", xlabel="x", ylabel="y")
print(json.dumps({"imported": imported, "svgs": svgs}))
"""


def _child(cwd: Path, cache: Path, **env: str) -> dict[str, list[object]]:
    full = {**os.environ, "TABDP_CACHE_DIR": str(cache), **env,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for var in ("MATPLOTLIBRC", "MPLCONFIGDIR"):
        if var not in env:
            full.pop(var, None)
    out = subprocess.run([sys.executable, "-c", _CHILD], cwd=cwd, env=full, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_cached_public_figures_and_the_confidential_ones_import_no_matplotlib(
        tmp_path: Path) -> None:
    """The second run of a page's three public figures finds them all without matplotlib."""
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    first = _child(work, cache)
    assert first["imported"] == [True, True, True]  # misses: drawn
    second = _child(work, cache)
    assert second == {**first, "imported": [False, False, False]}  # hits: no matplotlib


@pytest.mark.slow  # four fresh processes, three of them drawing: CI only. In the local loop,
# test_every_file_matplotlib_reads_at_import_is_in_the_key (below) checks in-process that the cwd
# and MPLCONFIGDIR files (and every other one) are in the key, and the test above the hit path
def test_a_matplotlibrc_change_is_drawn_again_in_a_fresh_process(tmp_path: Path) -> None:
    """A matplotlibrc where matplotlib would read it at import is another key, in a new process."""
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    first = _child(work, cache)
    assert first["imported"] == [True, True, True]  # misses: drawn
    # a matplotlibrc where matplotlib would read it is another key: drawn again, and it differs
    (work / "matplotlibrc").write_text("xtick.major.size: 9.0\n")
    third = _child(work, cache)
    assert third["imported"][0] is True and third["svgs"][0] != first["svgs"][0]
    assert _child(work, cache)["imported"] == [False, False, False]
    # in MPLCONFIGDIR (the folder's own file gone): another key again
    (work / "matplotlibrc").unlink()
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "matplotlibrc").write_text("ytick.major.size: 7.0\n")
    fourth = _child(work, cache, MPLCONFIGDIR=str(conf))
    assert fourth["imported"][0] is True and fourth["svgs"][0] not in (first["svgs"][0],
                                                                      third["svgs"][0])


@pytest.mark.parametrize("where", ["cwd", "MATPLOTLIBRC file", "MATPLOTLIBRC folder",
                                   "MPLCONFIGDIR", "XDG_CONFIG_HOME", "HOME .config",
                                   "HOME .matplotlib", "LOCALAPPDATA", "defaults",
                                   "version"])
def test_every_file_matplotlib_reads_at_import_is_in_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    from tabdp import _figcache

    home, pkg = tmp_path / "home", tmp_path / "pkg"
    (pkg / "mpl-data").mkdir(parents=True)
    (pkg / "mpl-data" / "matplotlibrc").write_text("lines.linewidth: 1.5\n")
    (pkg / "_version.py").write_text("version = '3.9.0'\n")
    monkeypatch.setattr(_figcache, "_package", lambda: pkg)
    monkeypatch.chdir(tmp_path)
    for var in ("MATPLOTLIBRC", "MPLCONFIGDIR", "XDG_CONFIG_HOME", "LOCALAPPDATA"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    files = {"cwd": tmp_path / "matplotlibrc",
             "MATPLOTLIBRC file": tmp_path / "rcfile",
             "MATPLOTLIBRC folder": tmp_path / "rcdir" / "matplotlibrc",
             "MPLCONFIGDIR": tmp_path / "mplconf" / "matplotlibrc",
             "XDG_CONFIG_HOME": tmp_path / "xdg" / "matplotlib" / "matplotlibrc",
             "HOME .config": home / ".config" / "matplotlib" / "matplotlibrc",
             "HOME .matplotlib": home / ".matplotlib" / "matplotlibrc",
             "LOCALAPPDATA": tmp_path / "lad" / "matplotlib" / "matplotlibrc",
             "defaults": pkg / "mpl-data" / "matplotlibrc",
             "version": pkg / "_version.py"}
    env = {"MATPLOTLIBRC file": ("MATPLOTLIBRC", tmp_path / "rcfile"),
           "MATPLOTLIBRC folder": ("MATPLOTLIBRC", tmp_path / "rcdir"),
           "MPLCONFIGDIR": ("MPLCONFIGDIR", tmp_path / "mplconf"),
           "XDG_CONFIG_HOME": ("XDG_CONFIG_HOME", tmp_path / "xdg"),
           "LOCALAPPDATA": ("LOCALAPPDATA", tmp_path / "lad")}
    if where in env:
        monkeypatch.setenv(env[where][0], str(env[where][1]))
    path = files[where]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("a: 1\n")
    settings = {"rc_files": _figcache._rc_files()}
    key = _figcache.figure_key("f", [], {}, settings)
    path.write_text("a: 2\n")
    assert _figcache.figure_key("f", [], {}, {"rc_files": _figcache._rc_files()}) != key
    path.unlink()
    assert _figcache.figure_key("f", [], {}, {"rc_files": _figcache._rc_files()}) != key
