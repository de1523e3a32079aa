"""tabdp: differentially private grouped tables with per-record (slowly scaling) guarantees.

Importing tabdp registers the ``.dp`` accessor on pandas and Polars frames.

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

from tabdp import mechanisms, noise
from tabdp.calibrate import CalibrationResult, FamilyComparison, calibrate, compare_families
from tabdp.exceptions import (
    BudgetExceededError,
    CalibrationError,
    ColumnNotFoundError,
    ColumnTypeError,
    DataValidationError,
    InvalidParameterError,
    PrivacyWarning,
    TabdpError,
    UnsupportedBackendError,
)
from tabdp.frame import KeySet, register
from tabdp.privacy import Budget, Report, Session, last_session
from tabdp.rng import RandomSource

__version__ = "0.1.0"

register()

__all__ = [
    "__version__",
    "mechanisms",
    "noise",
    "KeySet",
    "Session",
    "Report",
    "Budget",
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
    "BudgetExceededError",
    "UnsupportedBackendError",
    "CalibrationError",
    "PrivacyWarning",
]
