"""Budgets, the session ledger, composition and reports.

The names below are loaded on first use (PEP 562), so a module that needs one submodule (the
mechanisms read `tabdp.privacy.approx` and `tabdp.privacy.conversions`; a Spark worker unpickling a
mechanism imports them) does not import the ledger, the session and Polars with it.

Example:
    >>> from tabdp.privacy import Budget
    >>> float(Budget(1.0).limit(10.0))
    1.0
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tabdp._lazy_scipy import lazy_package

if TYPE_CHECKING:
    from tabdp.privacy.budget import Budget
    from tabdp.privacy.ledger import QueryRecord, UnitLosses
    from tabdp.privacy.lifetime import Ledger
    from tabdp.privacy.session import Report, Session, last_session

_LAZY: dict[str, str] = {
    "Budget": "tabdp.privacy.budget",
    "QueryRecord": "tabdp.privacy.ledger",
    "UnitLosses": "tabdp.privacy.ledger",
    "Ledger": "tabdp.privacy.lifetime",
    "Report": "tabdp.privacy.session",
    "Session": "tabdp.privacy.session",
    "last_session": "tabdp.privacy.session",
}

__all__ = ["Budget", "Ledger", "QueryRecord", "UnitLosses", "Report", "Session", "last_session"]


__getattr__, __dir__ = lazy_package(__name__, _LAZY, __all__, globals())
