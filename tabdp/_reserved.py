"""Column names tabdp reserves for its own columns, on every engine.

Every column an engine adds next to the input's (row ids, keep flags, cells, charges, running
totals...) starts with `RESERVED`, and a measure, key or unit column whose name starts with it,
in any letter case, is refused before anything is read (docs/privacy-semantics.md).

The confidential per-record report lists each unit's id under the unit column's name next to
`REPORT_COLUMNS` and one `report_column` per release: a unit column or a release whose name
would meet one of them, in any letter case, is refused before anything is read.
"""

from __future__ import annotations

__all__ = ["RESERVED", "is_reserved", "REPORT_COLUMNS", "report_column"]

#: The prefix of every column tabdp adds next to the input's.
RESERVED = "__tabdp"


def is_reserved(name: str) -> bool:
    """Whether a column name starts with tabdp's reserved prefix, in any letter case.

    In any case because Spark resolves column names without regard to case by default
    (``spark.sql.caseSensitive=false``): ``__TABDP_ACC0`` would be replaced by, or read as, an
    added ``__tabdp_acc0`` (review r28).

    Args:
        name: A column name.

    Returns:
        ``True`` when the name is reserved.

    Example:
        >>> is_reserved("__tabdp_row"), is_reserved("__TABDP_x"), is_reserved("__acc0")
        (True, True, False)
    """
    return name.lower().startswith(RESERVED)


#: The per-record report's own columns, next to the unit column (``row`` in row mode) and one
#: `report_column` per release (``rho_lifetime``: sessions with a lifetime ledger).
REPORT_COLUMNS = ("rho", "epsilon", "size", "epsilon_delta", "rho_lifetime")


def report_column(release: str) -> str:
    """The per-record report's column of one release's per-unit ρ.

    A unit column of that name, or a release named ``lifetime`` in a session with a lifetime
    ledger (``rho_lifetime``), would meet another column of the report: refused, in any letter
    case (Spark resolves column names without regard to case).

    Args:
        release: The release's name.

    Returns:
        ``rho_<release>``.

    Example:
        >>> report_column("payroll")
        'rho_payroll'
    """
    return f"rho_{release}"
