"""Deprecated home of the report figures: they moved to [`plotting`][tabdp.plotting] (one release).

Example:
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", DeprecationWarning)
    ...     from tabdp.report.plots import PALETTE
    >>> import tabdp.plotting
    >>> PALETTE is tabdp.plotting.PALETTE
    True
"""

from __future__ import annotations

from typing import Any

from tabdp._deprecation import moved_name

_MOVED = frozenset({"PALETTE", "loss_curves_svg", "moe_curves_svg", "histogram_svg",
                    "scatter_svg"})


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import tabdp.plotting

        return moved_name(__name__, name, "tabdp.plotting", getattr(tabdp.plotting, name))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
