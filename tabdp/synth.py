"""Deprecated path of [`synth`][tabdp.datasets.synth] (the synthetic CBP-like generator).

Every name read from here warns and is the one of [`synth`][tabdp.datasets.synth] (for one
release).

Example:
    >>> import warnings
    >>> import tabdp.synth, tabdp.datasets.synth
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", DeprecationWarning)
    ...     old = tabdp.synth.generate_establishments
    >>> old is tabdp.datasets.synth.generate_establishments
    True
"""

from __future__ import annotations

from typing import Any

from tabdp._deprecation import moved_name


def __getattr__(name: str) -> Any:
    import tabdp.datasets.synth as new

    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return moved_name(__name__, name, "tabdp.datasets.synth", getattr(new, name))
