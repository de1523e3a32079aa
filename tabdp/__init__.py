"""tabdp: differentially private grouped tables with per-record (slowly scaling) guarantees.

Importing tabdp registers the ``.dp`` accessor on pandas and Polars frames; ``tabdp.dp(frame)``
returns the same accessor typed for mypy and pyright.

Example:
    >>> import polars as pl, tabdp
    >>> df = pl.DataFrame({"county": ["a", "a", "b"], "payroll": [10.0, 200.0, 5.0]})
    >>> keys = tabdp.KeySet.from_dict(county=["a", "b"])
    >>> session = tabdp.Session(seed=1)
    >>> out = df.dp.sum("payroll", by="county", keys=keys,
    ...                 mechanism=tabdp.mechanisms.LogTransform(sigma=0.25, offset=10.0),
    ...                 session=session)
    >>> out.columns
    ['county', 'payroll', 'payroll_sd', 'payroll_moe', 'payroll_lower', 'payroll_upper']
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from tabdp._accessor_hook import install as _install_accessor
from tabdp._version import __version__
from tabdp.exceptions import (
    BudgetExceededError,
    CalibrationError,
    ColumnNotFoundError,
    ColumnTypeError,
    DataFailure,
    DataValidationError,
    InvalidParameterError,
    PrivacyWarning,
    TabdpError,
    UnsupportedBackendError,
)

if TYPE_CHECKING:  # what the lazy attributes below resolve to, for type checkers and IDEs
    from tabdp import mechanisms, noise
    from tabdp.calibrate import (
        CalibrationResult,
        FamilyComparison,
        calibrate,
        compare_families,
    )
    from tabdp.curator import AuthorSession, Curator
    from tabdp.frame import KeySet, dp
    from tabdp.privacy import Budget, Ledger, Report, Session, last_session
    from tabdp.rng import RandomSource

# Public names loaded on first access (PEP 562), so that `import tabdp` and `tabdp --help` stay
# fast: SciPy, Matplotlib, mpmath, python-flint, pandas and Polars load only when used.
_LAZY: dict[str, str] = {
    "KeySet": "tabdp.frame",
    "Curator": "tabdp.curator",
    "AuthorSession": "tabdp.curator",
    "dp": "tabdp.frame",
    "Session": "tabdp.privacy",
    "Report": "tabdp.privacy",
    "Budget": "tabdp.privacy",
    "Ledger": "tabdp.privacy",
    "last_session": "tabdp.privacy",
    "RandomSource": "tabdp.rng",
    "calibrate": "tabdp.calibrate",
    "compare_families": "tabdp.calibrate",
    "CalibrationResult": "tabdp.calibrate",
    "FamilyComparison": "tabdp.calibrate",
}
#: Subpackages and modules reachable as attributes after `import tabdp` (imported on access).
_SUBMODULES = frozenset({
    "calibrate", "cli", "curator", "datasets", "exceptions", "frame", "mechanisms", "noise",
    "plotting", "privacy", "release", "report", "rng", "sensitivity",
})
#: Old attribute paths kept for one release (importing them warns): name -> module.
_DEPRECATED_SUBMODULES = {"synth": "tabdp.synth"}  # the generator is tabdp.datasets.synth


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"tabdp.{name}")
    elif name in _DEPRECATED_SUBMODULES:
        return importlib.import_module(_DEPRECATED_SUBMODULES[name])
    else:
        raise AttributeError(f"module 'tabdp' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES)


class _Package(types.ModuleType):
    """The ``tabdp`` module: ``tabdp.calibrate`` stays the function once the submodule loads.

    The import system binds every submodule as an attribute of its package when it first loads
    it; for ``tabdp.calibrate`` (a submodule and a function) the function wins, as it did when
    the package imported it eagerly.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "calibrate" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
_install_accessor()

__all__ = [
    "__version__",
    "mechanisms",
    "noise",
    "KeySet",
    "Curator",
    "AuthorSession",
    "dp",
    "Session",
    "Report",
    "Budget",
    "Ledger",
    "RandomSource",
    "last_session",
    "calibrate",
    "compare_families",
    "CalibrationResult",
    "FamilyComparison",
    "TabdpError",
    "InvalidParameterError",
    "ColumnNotFoundError",
    "ColumnTypeError",
    "DataValidationError",
    "DataFailure",
    "BudgetExceededError",
    "UnsupportedBackendError",
    "CalibrationError",
    "PrivacyWarning",
]
