"""Budgets, the session ledger, composition and reports.

Example:
    >>> from tabdp.privacy import Budget
    >>> float(Budget(1.0).limit(10.0))
    1.0
"""

from tabdp.privacy.budget import Budget
from tabdp.privacy.ledger import QueryRecord, UnitLosses
from tabdp.privacy.lifetime import Ledger
from tabdp.privacy.session import Report, Session, last_session

__all__ = ["Budget", "Ledger", "QueryRecord", "UnitLosses", "Report", "Session", "last_session"]
