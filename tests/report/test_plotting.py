"""The seed 002 Figure 1 helper (:mod:`tabdp.plotting`).

* the figure draws exactly the numbers of :func:`tabdp.mechanisms.smooth.std_vs_gamma`, one line per
  family, against the γ grid given (or the default grid);
* what the figure is for: PolyPlace is the lowest curve wherever it and the baselines are defined;
* axes (log / linear), labels, title with ε, legend; drawing on a caller's axes;
* PNG and SVG files with the right magic bytes; argument errors; no pyplot state left behind.
"""

from __future__ import annotations

import io
import pathlib
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from PIL import Image

from tabdp.exceptions import InvalidParameterError
from tabdp.mechanisms.smooth import std_vs_gamma
from tabdp.plotting import SMOOTH_NOISE_CURVES, plot_smooth_noise_std, save_smooth_noise_std

FAMILIES = list(SMOOTH_NOISE_CURVES)          # drawing order of the lines
GAMMAS = np.geomspace(1e-3, 0.49, 60)         # ε = 1: spans every family's limit
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _lines(fig: Figure) -> dict[str, Line2D]:
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == len(FAMILIES)
    return dict(zip(FAMILIES, lines, strict=True))


def test_one_line_per_family_with_the_computed_numbers() -> None:
    fig = plot_smooth_noise_std(1.0, GAMMAS)
    expected = std_vs_gamma(1.0, GAMMAS)
    assert set(FAMILIES) == set(expected) - {"gamma"}
    for key, line in _lines(fig).items():
        np.testing.assert_array_equal(line.get_xdata(), GAMMAS)
        np.testing.assert_array_equal(line.get_ydata(), expected[key])   # nan where undefined
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels[0].startswith("PolyPlace") and "Student" in labels[1]
    assert "Cauchy" in labels[2] and "SS" in labels[3] and "global" in labels[4]


@pytest.mark.parametrize("epsilon", [1.0, 0.5, 3.0])
def test_polyplace_is_the_lowest_curve(epsilon: float) -> None:
    fig = plot_smooth_noise_std(epsilon, GAMMAS * epsilon)
    y = {k: np.asarray(line.get_ydata(), dtype=float) for k, line in _lines(fig).items()}
    baselines = np.vstack([y["student_t"], y["cauchy"], y["laplace"]])
    all_defined = np.all(np.isfinite(baselines), axis=0) & np.isfinite(y["polyplace"])
    assert all_defined.sum() >= 20
    assert np.all(y["polyplace"][all_defined] < baselines[:, all_defined].min(axis=0))
    # Wherever any baseline is defined PolyPlace is defined and below it ...
    some = np.any(np.isfinite(baselines), axis=0)
    assert np.all(np.isfinite(y["polyplace"][some]))
    assert np.all(y["polyplace"][some] < np.nanmin(baselines[:, some], axis=0))
    # ... and it alone is defined between ε/3 and ε/2.
    only = (GAMMAS > 1 / 3 + 1e-9) & (GAMMAS < 0.5)
    assert only.any() and np.all(np.isfinite(y["polyplace"][only]))
    assert not np.any(np.isfinite(baselines[:, only]))
    # The dashed reference: Laplace at the global sensitivity, the γ → 0 limit of PolyPlace.
    np.testing.assert_allclose(y["laplace_global"], np.sqrt(2) / epsilon)
    assert y["polyplace"][0] == pytest.approx(np.sqrt(2) / epsilon, rel=5e-3)
    assert _lines(fig)["laplace_global"].get_linestyle() == "--"


def test_axes_labels_and_title() -> None:
    ax = plot_smooth_noise_std(1.0, GAMMAS).axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    assert "gamma" in ax.get_xlabel() and "standard deviation" in ax.get_ylabel()
    assert r"\varepsilon" in ax.get_title() and "= 1" in ax.get_title()
    assert ax.get_ylim()[1] == pytest.approx(50 * np.sqrt(2))   # view capped, data kept
    ax2 = plot_smooth_noise_std(2.5, GAMMAS * 2.5, log=False).axes[0]
    assert (ax2.get_xscale(), ax2.get_yscale()) == ("linear", "linear")
    assert "= 2.5" in ax2.get_title() and ax2.get_ylim()[0] == 0.0
    legend = [t.get_text() for t in ax2.get_legend().get_texts()]
    assert r"\delta = 10^{-5}" in legend[3]
    legend3 = plot_smooth_noise_std(delta=2.5e-6).axes[0].get_legend().get_texts()[3].get_text()
    assert r"2.5\times10^{-6}" in legend3


def test_default_grids() -> None:
    x_log = _lines(plot_smooth_noise_std(2.0))["polyplace"].get_xdata()
    np.testing.assert_allclose(x_log, np.geomspace(1e-3, 0.495, 200) * 2.0)
    x_lin = _lines(plot_smooth_noise_std(2.0, log=False))["polyplace"].get_xdata()
    np.testing.assert_array_equal(x_lin, std_vs_gamma(2.0)["gamma"])


def test_delta_moves_only_the_laplace_curve() -> None:
    a = {k: ln.get_ydata() for k, ln in _lines(plot_smooth_noise_std(1.0, GAMMAS)).items()}
    b = {k: ln.get_ydata() for k, ln in
         _lines(plot_smooth_noise_std(1.0, GAMMAS, delta=1e-3)).items()}
    for key in FAMILIES:
        if key == "laplace":
            np.testing.assert_array_equal(b[key], std_vs_gamma(1.0, GAMMAS, delta=1e-3)[key])
            assert np.isfinite(b[key]).sum() > np.isfinite(a[key]).sum()   # larger γ limit
        else:
            np.testing.assert_array_equal(a[key], b[key])


def test_draws_on_a_given_axes_and_subfigure() -> None:
    fig = Figure()
    left, right = fig.subplots(1, 2)
    assert plot_smooth_noise_std(1.0, GAMMAS, ax=right) is fig
    assert len(right.get_lines()) == len(FAMILIES) and not left.get_lines()
    sub = Figure().subfigures(1, 2)[1]
    ax = sub.add_subplot()
    out = plot_smooth_noise_std(1.0, GAMMAS, ax=ax)
    assert isinstance(out, Figure) and out is sub.figure and len(ax.get_lines()) == 5


def test_leaves_no_pyplot_figures_open() -> None:
    before = plt.get_fignums()
    fig = plot_smooth_noise_std()
    assert plt.get_fignums() == before
    buf = io.BytesIO()
    fig.savefig(buf, format="png")          # the Agg canvas renders without pyplot
    assert buf.getvalue().startswith(PNG_MAGIC)


@pytest.mark.slow  # CI only: a costly case the local loop leaves out (2-4 s)
def test_save_png_and_svg(tmp_path: pathlib.Path) -> None:
    png = save_smooth_noise_std(tmp_path / "fig1.png", epsilon=1.0, dpi=80)
    assert png == tmp_path / "fig1.png"
    data = png.read_bytes()
    assert len(data) > 10_000 and data.startswith(PNG_MAGIC)
    with Image.open(png) as img:
        assert img.size == (7 * 80, int(4.5 * 80))
        assert len(img.convert("L").getcolors(maxcolors=1 << 16) or ()) > 10  # not blank
    svg = save_smooth_noise_std(str(tmp_path / "fig1.SVG"), gammas=GAMMAS, log=False)
    text = svg.read_bytes()
    assert text.lstrip().startswith(b"<?xml") and b"<svg" in text[:2000]
    assert text.rstrip().endswith(b"</svg>")
    again = save_smooth_noise_std(tmp_path / "again.svg", gammas=GAMMAS, log=False)
    assert again.read_bytes() == text           # no timestamp: reproducible files


@pytest.mark.parametrize("kwargs", [
    {"epsilon": 0.0}, {"epsilon": -1.0}, {"epsilon": float("nan")}, {"epsilon": "1"},
    {"gammas": []}, {"gammas": [0.1, -0.1]}, {"gammas": [0.0, 0.1]}, {"gammas": [np.inf]},
    {"gammas": ["a"]}, {"delta": 0.0}, {"delta": 1.0}, {"log": "yes"}, {"ax": "axes"},
])
def test_bad_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidParameterError):
        plot_smooth_noise_std(**kwargs)


def test_save_rejects_other_formats_and_ax(tmp_path: pathlib.Path) -> None:
    for name in ("fig.pdf", "fig", "fig.png.txt"):
        with pytest.raises(InvalidParameterError, match=r"\.png or \.svg"):
            save_smooth_noise_std(tmp_path / name)
    with pytest.raises(InvalidParameterError, match="ax"):
        save_smooth_noise_std(tmp_path / "f.png", ax=Figure().add_subplot())
    with pytest.raises(InvalidParameterError, match="dpi"):
        save_smooth_noise_std(tmp_path / "f.png", dpi=0)
    assert not list(tmp_path.iterdir())


# -- the report figures' dry-run draw (issue 29: the fixed cost of a release) -------------------
def _report_svgs() -> list[str]:
    """One SVG of every report plot drawn through matplotlib, and its variants (panels, legends).

    (The confidential page's histogram and scatter are written without matplotlib:
    ``tests/report/test_svgchart.py``.)
    """
    from tabdp import plotting as P

    sizes = [1.0, 1e2, 1e4, 1e6, 1e8, 1e10]
    curve = [{"delta": d, "rho": 0.05 * np.log1p(d) ** 2, "epsilon_delta": np.log1p(d)}
             for d in sizes]
    moe = [{"total": t, "sd": 3.0, "moe": 5.0} for t in (10.0, 1e3, 1e5)]
    return [
        P.loss_curves_svg({"a": curve, "b": curve[:4], "total": curve}, title="one panel"),
        P.loss_curves_svg({"pay": curve, "jobs": curve[1:], "n": curve[:3]}, title="panels",
                          units={"pay": "dollars", "jobs": "persons", "n": "rows"},
                          key="epsilon_delta", ylabel="ε"),
        P.moe_curves_svg({"t: x": moe, "u: x": moe, "v: n": moe[:2]}, title="moe",
                         cv_line=0.5, units={"t: x": "x", "u: x": "x", "v: n": "rows"}),
    ]


@pytest.mark.slow  # 12 s of the local loop (2026-12-03): CI only
def test_report_figures_draw_the_same_svg_as_plain_matplotlib(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tabdp import plotting as P

    dry_runs: list[bool] = []
    real = P._drawing_disabled

    def spy(renderer: Any) -> bool:
        dry_runs.append(real(renderer))
        return dry_runs[-1]

    monkeypatch.setattr(P, "_drawing_disabled", spy)
    ours = _report_svgs()
    import matplotlib

    if tuple(int(p) for p in matplotlib.__version__.split(".")[:2]) >= (3, 7):
        assert dry_runs.count(True) == len(ours)  # each savefig's dry run only ran the layout
    else:  # the 3.6 floor: its savefig makes no detectable dry run; every draw is a full one
        assert dry_runs.count(True) in (0, len(ours))
    monkeypatch.setattr(P, "_ReportFigure", Figure)  # matplotlib's own dry-run draw
    plain = _report_svgs()
    assert [len(s) for s in ours] == [len(s) for s in plain]
    for a, b in zip(ours, plain, strict=True):
        assert a == b
