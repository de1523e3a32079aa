"""Plots explaining tabdp's defaults (needs matplotlib, a dependency of tabdp).

:func:`plot_smooth_noise_std` reproduces seed 002's Figure 1: the standard deviation of each
smooth-sensitivity noise family, per unit of smooth sensitivity (SS), against the smoothness γ at a
fixed ε. It shows why PolyPlace is the default of ``df.dp.median`` / ``df.dp.quantile``: at every γ
its noise is the smallest of the families usable with smooth sensitivity, and it stays finite up to
γ = ε/2 (Student's t stops at ε/3, the generalized Cauchy at ε/4, Laplace-with-SS at
ε/ln(2/δ)). The numbers are those of :func:`tabdp.mechanisms.smooth.std_vs_gamma`; the plot only draws
them.

Figures are built on matplotlib's non-interactive Agg canvas, without pyplot: nothing is shown, no
display is needed, no pyplot figure is left open, and the global backend of the caller (e.g. a
notebook's) is left alone. In a notebook the returned figure displays itself; elsewhere save it
with ``fig.savefig(...)`` or :func:`save_smooth_noise_std`.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import numpy as np
from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure, SubFigure
from numpy.typing import ArrayLike

from tabdp._validation import check_real
from tabdp.exceptions import InvalidParameterError
from tabdp.mechanisms.smooth import DEFAULT_DELTA, std_vs_gamma

__all__ = ["plot_smooth_noise_std", "save_smooth_noise_std", "SMOOTH_NOISE_CURVES"]

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
    """Plot the noise std per unit smooth sensitivity of each family against γ (seed 002 Fig. 1).

    One line per entry of :data:`SMOOTH_NOISE_CURVES`, drawing exactly the arrays of
    :func:`tabdp.mechanisms.smooth.std_vs_gamma`: PolyPlace, Student's t and the generalized Cauchy (shape
    d / c chosen to minimize the std at each γ), Laplace with smooth sensitivity (approximate DP
    at ``delta``; only where γ < ε/ln(2/δ)), and, dashed, Laplace noise √2/ε calibrated to the
    *global* sensitivity — the γ → 0 limit of PolyPlace, which however multiplies the larger
    global sensitivity rather than SS. A family is left out (a gap in its line) where its std is
    infinite. The smaller the curve, the less noise a release adds for the same smooth
    sensitivity.

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
                    hint="delta is the failure probability of Laplace with SS, e.g. 1e-5")
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
    """Draw :func:`plot_smooth_noise_std` and write it to a PNG or SVG file (by extension).

    Args:
        path: Destination ending in ``.png`` or ``.svg`` (case-insensitive); parent folders must
            exist.
        dpi: Resolution of a PNG.
        **kwargs: Passed to :func:`plot_smooth_noise_std` (``epsilon``, ``gammas``, ``delta``,
            ``log``; not ``ax``).

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
