"""Column names tabdp reserves for its own columns, on every engine.

Every column an engine adds next to the input's (row ids, keep flags, cells, charges, running
totals...) starts with `RESERVED`, and a measure, key or unit column whose name starts with it,
in any letter case, is refused before anything is read (docs/privacy-semantics.md).

The confidential per-record report lists each unit's id under the unit column's name next to
`REPORT_COLUMNS` and one `report_column` per release: a unit column or a release whose name
would meet one of them, in any letter case, is refused before anything is read.
"""

from __future__ import annotations

__all__ = ["RESERVED", "ROW_ID", "is_reserved", "REPORT_COLUMNS", "report_column",
           "report_clash"]

#: The prefix of every column tabdp adds next to the input's.
RESERVED = "__tabdp"
#: The row id column tabdp assigns when each row is a unit (row mode; ``tabdp run``).
ROW_ID = f"{RESERVED}_row"


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


def report_clash(release: str, unit: str | None, lifetime: bool,
                 losses: str | None = None) -> str | None:
    """Why ``release``'s column of the per-record report meets another one, or ``None``.

    The one rule of the session (`tabdp.Session.release_name`) and of the spec's checks: the
    report lists each unit's id under the unit column's name and, with a lifetime ledger, each
    unit's lifetime ρ under ``rho_lifetime``; names compared in any letter case. Public names
    only.

    Args:
        release: The release's name.
        unit: The unit column (``None``: each row is a unit, listed as ``row``).
        lifetime: Whether the session has a lifetime ledger.
        losses: How the reason names the release's losses (default: by the release's name).

    Returns:
        The reason, a phrase without a final period, or ``None``.

    Example:
        >>> report_clash("pay", "RHO_PAY", False)[:60]
        "the per-record report would list the losses of release 'pay'"
        >>> report_clash("pay", "estab_id", True) is None
        True
    """
    col = report_column(release)
    what = losses or f"the losses of release {release!r}"
    if unit is not None and col.lower() == unit.lower():
        return (f"the per-record report would list {what} in column {col!r}, the name (in any "
                f"letter case) of the unit column {unit!r}, under which it lists each unit's id")
    if lifetime and col.lower() == "rho_lifetime":
        return (f"the per-record report would list {what} in column {col!r}, where a session "
                "with a lifetime ledger lists each unit's lifetime loss")
    return None
